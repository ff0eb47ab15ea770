"""demo_report: the count baselines, the held-out check, and a real tiny run's report."""
import collections
import json
import os
import re

import numpy as np
import pytest

from bert_jax import demo_report
from bert_jax.data import tokenizer as tokenizer_lib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TINY_VOCAB = os.path.join(ROOT, "tests", "testdata", "hf", "tiny_bert", "vocab.txt")
LINES = ["the cat sat on the mat", "the cat is big", "the dog sat on the tree",
         "a dog sat", "the cat sat"]


@pytest.fixture(scope="module")
def tok():
  return tokenizer_lib.load_tokenizer(TINY_VOCAB)


def _naive_counts(lines, tok):
  """Unigram and successor counts with plain Python dicts (the reference)."""
  uni, succ = collections.Counter(), collections.defaultdict(collections.Counter)
  for line in lines:
    ids = tok.encode(line, add_special_tokens=False).ids
    uni.update(ids)
    for a, b in zip(ids, ids[1:]):
      succ[a][b] += 1
  best = {a: min(c, key=lambda b: (-c[b], b)) for a, c in succ.items()}
  return uni, best


def test_counts_equal_naive_counting(tok):
  counts = demo_report.count_tokens(LINES, tok, tok.get_vocab_size())
  uni, best = _naive_counts(LINES, tok)
  the, cat, sat = (tok.token_to_id(w) for w in ("the", "cat", "sat"))
  assert counts.unigram[the] == uni[the] == 6 and counts.most_frequent == the
  # "the" is followed by cat x3, mat, dog, tree: its successor is "cat"; "sat" -> "on".
  assert counts.successor[the] == cat == best[the]
  assert counts.successor[sat] == tok.token_to_id("on")
  for a in range(tok.get_vocab_size()):
    assert counts.successor[a] == best.get(a, -1)
  # An unseen left neighbour (and [MASK]) falls back to the most frequent token.
  mask = tok.token_to_id("[MASK]")
  np.testing.assert_array_equal(counts.bigram(np.array([[the, mask], [sat, 0]])),
                                [[cat, the], [tok.token_to_id("on"), the]])


def test_held_out_check(tok):
  counts = demo_report.count_tokens(LINES, tok, tok.get_vocab_size())
  assert not demo_report.is_held_out("the [MASK] sat on the mat", counts)
  assert not demo_report.is_held_out("[CLS] a dog [MASK] [SEP]", counts)
  assert demo_report.is_held_out("the [MASK] sat on the sky", counts)


def test_texts_default_to_the_demo_sentences(monkeypatch):
  """`make demo` passes no --text: the report fills DEMO_TEXTS; --text replaces them."""
  seen = []
  monkeypatch.setattr(demo_report, "report", lambda w, texts, k: seen.append(list(texts)))
  assert demo_report.main(["--workdir", "w"]) == 0
  assert demo_report.main(["--workdir", "w", "--text", "a [MASK] b"]) == 0
  assert seen == [list(demo_report.DEMO_TEXTS), ["a [MASK] b"]]
  assert all(t.count("[MASK]") == 1 for t in demo_report.DEMO_TEXTS)


def test_bad_workdir_one_line(tmp_path, capsys):
  assert demo_report.main(["--workdir", str(tmp_path / "none"), "--text", "a [MASK]"]) == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("demo_report: error: ")
  # A word2vec workdir (no Transformer in its checkpoint): one line, was a traceback.
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  ck = checkpoint.Checkpointer(str(tmp_path / "w2v" / "checkpoints"), async_save=False)
  ck.save(2, {"params": {"target": np.zeros((3, 2), np.float32)}}, {"task": "word2vec"})
  ck.close()
  assert demo_report.main(["--workdir", str(tmp_path / "w2v")]) == 2
  assert capsys.readouterr().err == (
      f"demo_report: error: {tmp_path}/w2v/checkpoints/2 is a 'word2vec' checkpoint: it "
      "holds no Transformer model (no model_config in its meta).\n")


def test_report_of_a_tiny_run(tmp_path, capsys):
  """A 6-step run whose loop evaluated the whole validation split: the report's model
  accuracy is the loop's, and the baselines equal naive counting on the same batches."""
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
  from tests.train.test_loop import e2e_config  # pylint: disable=g-import-not-at-top
  # e2e_config's model and shapes (a 256-token vocab, not 400): the train step is the
  # program tests/train/test_loop.py compiles, served by the session's persistent XLA cache.
  config = e2e_config(str(tmp_path / "data"))
  data = os.path.join(ROOT, "tests", "testdata", "data")
  config.data.update(text_files=",".join(os.path.join(data, f) for f in (
      "tiny_corpus.txt", "paragraphs.txt")), validation_fraction=0.2)
  config.train.update(eval_every=6, eval_steps=0)
  workdir = str(tmp_path / "run")
  loop.train_and_evaluate(config, workdir, registry.get_task(config))
  texts = ["the [MASK] of the", "the [MASK] is", "a [MASK] ."]  # 3, as `make demo` (16 positions)
  capsys.readouterr()  # the training's lines: `out` is the report alone
  got = demo_report.report(workdir, texts, top_k=5)
  out = capsys.readouterr().out
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    logged = [json.loads(l) for l in f if "eval/mlm_accuracy" in l][-1]["eval/mlm_accuracy"]
  acc = got["accuracy"]
  assert acc["model"] == pytest.approx(logged, abs=1e-6)

  task, _, _ = demo_report.load_run(workdir)
  prepared = next(iter(task._prepared.values()))  # pylint: disable=protected-access
  tok = prepared.tokenizer()
  uni, best = _naive_counts(demo_report.train_lines(prepared.documents_dir), tok)
  for s in demo_report.special_ids(tok):
    uni.pop(s, None)
  top = min(uni, key=lambda t: (-uni[t], t))
  hits = collections.Counter()
  for batch in task.eval_iterator({}, 8, 0, 1):
    for r in range(len(batch["input_ids"])):
      for pos, target, w in zip(batch["masked_lm_positions"][r], batch["masked_lm_ids"][r],
                                batch["masked_lm_weights"][r]):
        if w:
          left = int(batch["input_ids"][r][pos - 1])
          hits["n"] += 1
          hits["mf"] += target == top
          hits["bigram"] += target == best.get(left, top)
  assert acc["positions"] == hits["n"] > 0
  assert acc["most frequent"] == pytest.approx(hits["mf"] / hits["n"])
  assert acc["bigram"] == pytest.approx(hits["bigram"] / hits["n"])
  assert f"most frequent token ({tok.id_to_token(top)!r})" in out
  assert "the [MASK] of the" in out and "unigram prior: " in out
  assert len(got["fills"][0][0]) == 5
  # README pastes `make demo`'s report verbatim: the same lines in the same format (from
  # its first line: data preparation logs its own line before it).
  report = out[out.index("held-out MLM accuracy"):]
  assert _skeleton(_readme_demo_block()) == _skeleton(report), report


def _readme_demo_block() -> str:
  """The code block under README's "What `make demo` prints" heading."""
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    text = f.read()
  section = text[text.index("## What `make demo` prints"):]
  return section.split("```text\n", 1)[1].split("```\n", 1)[0]


def _skeleton(report: str) -> list[str]:
  """The report's lines with what a run decides (texts, tokens, numbers) made generic."""
  lines = []
  for line in report.strip("\n").splitlines():
    line = re.sub(r"^.* {3}\((held out|IN THE TRAINING DOCUMENTS)\)$", "TEXT   (HELD)", line)
    line = re.sub(r"\((['\"]).*?\1\)", "('T')", line)             # the most frequent token
    line = re.sub(r"\S+ \d\.\d{3}(?=  |$)", "T P", line)          # fill-mask's `token p`
    lines.append(re.sub(r"[+-]?\d+(\.\d+)?", "N", line))
  return lines


def test_skeleton_keeps_the_format_and_drops_the_values():
  a = ("\nheld-out MLM accuracy on the 23987 masked positions (11% have ...):\n"
       "  most frequent token ('the') 0.0384   model - bigram = +0.1851\n\n"
       "the [MASK] was killed .   (held out)\n  [MASK] model: government 0.038  , 0.031\n")
  b = ("held-out MLM accuracy on the 77 masked positions (3% have ...):\n"
       "  most frequent token (',') 0.1   model - bigram = -0.25\n\n"
       "a [MASK] b   (IN THE TRAINING DOCUMENTS)\n  [MASK] model: ##s 0.500  the 0.100\n")
  assert _skeleton(a) == _skeleton(b)
  assert _skeleton(a) != _skeleton(a.replace("  [MASK] model:", "  [MASK]:"))
