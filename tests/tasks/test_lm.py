"""The lm task: packing (segment ids, restarting positions, no cross-document attention),
bits per byte against a hand computation, the checkpointable iterator, a real train step."""
import math
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from bert_jax.models.gpt import GPT
from bert_jax.models.variants import get_model_config
from bert_jax.tasks import registry
from bert_jax.tasks.lm import data as data_lib
from bert_jax.train.defaults import base_config, train_config

E = 0  # the separator id in the hand-built streams


def test_rows_pack_documents_with_segments_positions_and_every_target_once():
  # Documents <E>1 2 3 | <E>4 5 | <E>6 7 8 9 10, rows of 4.
  tokens = np.array([E, 1, 2, 3, E, 4, 5, E, 6, 7, 8, 9, 10], np.int32)
  starts = np.array([0, 4, 7])
  nbytes = np.arange(11, dtype=np.int32) + 1   # token t has t + 1 bytes
  maker = data_lib.RowMaker(tokens, starts, nbytes, seq_len=4, pad_id=E)
  b = maker(np.array([[0, 0], [0, 1], [0, 2], [0, -1]]))
  np.testing.assert_array_equal(b["input_ids"], [[E, 1, 2, 3], [E, 4, 5, E], [6, 7, 8, 9],
                                                 [E, E, E, E]])
  np.testing.assert_array_equal(b["targets"], [[1, 2, 3, E], [4, 5, E, 6], [7, 8, 9, 10],
                                               [E, E, E, E]])
  np.testing.assert_array_equal(b["segment_ids"], [[1, 1, 1, 1], [1, 1, 1, 2], [1, 1, 1, 1],
                                                   [0, 0, 0, 0]])
  # Positions restart at each document start and at the row start (doc 3 continues).
  np.testing.assert_array_equal(b["positions"], [[0, 1, 2, 3], [0, 1, 2, 0], [0, 1, 2, 3],
                                                 [0, 0, 0, 0]])
  np.testing.assert_array_equal(b["weights"], [[1] * 4] * 3 + [[0] * 4])
  np.testing.assert_array_equal(b["target_bytes"][0], [2, 3, 4, 1])
  # 13 tokens -> 12 targets: 3 full rows; eval counts the same rows, train only full ones.
  assert data_lib.num_rows(13, 4, full_only=True) == 3
  assert data_lib.num_rows(14, 4, full_only=False) == 4
  last = maker(np.array([[0, 3]]))  # a 14-token stream would put one target here; 13: none
  assert last["weights"].sum() == 0


def test_packed_documents_do_not_attend_across_the_boundary():
  cfg = get_model_config("gpt/small", num_layers=2, hidden_size=32, num_heads=4, mlp_dim=64,
                         vocab_size=50, max_len=16, deterministic=True)
  model = GPT(cfg)
  tokens = np.array([E, 11, 12, 13, 14, E, 21, 22, 23], np.int32)
  b = data_lib.RowMaker(tokens, np.array([0, 5]), np.ones(50, np.int32), 8, E)(
      np.array([[0, 0]]))
  # Jitted: one compile per shape instead of eager op-by-op dispatch of the model.
  params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  packed = jax.jit(lambda p, ids, pos, seg: model.apply(
      {"params": p}, ids, positions=pos, packed_segment_ids=seg))(
          params, b["input_ids"], b["positions"], b["segment_ids"])
  apply = jax.jit(lambda p, ids: model.apply({"params": p}, ids))
  alone = apply(params, jnp.asarray([[E, 21, 22]]))  # doc 2 by itself
  np.testing.assert_allclose(np.asarray(packed[0, 5:8]), np.asarray(alone[0]), atol=1e-5)
  first = apply(params, jnp.asarray([[E, 11, 12, 13, 14]]))
  np.testing.assert_allclose(np.asarray(packed[0, :5]), np.asarray(first[0]), atol=1e-5)


DOCS = ["The cat sat on the mat.\nIt was a sunny day in the city.",
        "Naïve cafés serve crème brûlée.\nPrices rise, and so does the river.",
        "Über alles: a third document.\nIt ends here."]


def _many_docs(n=60):
  rng = np.random.default_rng(0)
  words = "the a cat dog sat ran on in mat park tree bird sang day city river".split()
  return ["\n".join(" ".join(rng.choice(words, size=8)).capitalize() + "."
                    for _ in range(3)) for _ in range(n)]


def _lm_config(tmp_path, docs=DOCS, validation_fraction=0.0, **train):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  c = base_config("lm")
  c.model = ml_collections.ConfigDict(dict(
      variant="gpt/small", vocab_size=300, hidden_size=32, num_heads=4, num_layers=1,
      mlp_dim=64, max_len=16, dropout_rate=0.0, attention_dropout_rate=0.0))
  from configs_gpt import data_config  # noqa: E402 pylint: disable=g-import-not-at-top
  c.data = data_config("text", vocab_size=300, seq_len=16)
  c.data.text_files = str(corpus)
  c.data.data_dir = str(tmp_path / "data")
  c.data.validation_fraction = validation_fraction
  c.data.read_threads = 0
  c.train = train_config(batch_size=8, num_steps=2, learning_rate=1e-3, warmup_steps=1,
                         log_every=1, eval_every=2, eval_steps=0, checkpoint_every=2,
                         async_checkpoints=False)
  c.train.update(train)
  return c


@pytest.fixture
def configs_gpt_path(monkeypatch):
  import sys  # pylint: disable=g-import-not-at-top
  import importlib.util  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  spec = importlib.util.spec_from_file_location("configs_gpt", os.path.join(root, "configs",
                                                                          "gpt.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  monkeypatch.setitem(sys.modules, "configs_gpt", module)


def test_bits_per_byte_of_a_uniform_model_is_log2_vocab_times_tokens_over_bytes(
    tmp_path, configs_gpt_path):
  del configs_gpt_path
  c = _lm_config(tmp_path)
  prepared = data_lib.prepare(c.data, verbose=False)
  tokens = prepared.tokens("train")
  assert len(prepared.starts("train")) == len(DOCS)
  text_bytes = sum(len(d.encode("utf-8")) for d in DOCS)  # sentences joined by newlines
  sums = {"nll": 0.0, "tokens": 0.0, "bytes": 0.0, "correct": 0.0}
  task = registry.get_task(c)
  vocab = prepared.vocab_size
  for batch in data_lib.eval_iterator(c.data, prepared, 8, 0, 1, 16, split="train"):
    out = {"logits": jnp.zeros(batch["input_ids"].shape + (vocab,))}  # uniform over vocab
    for k, v in task.metric_sums(out, batch).items():
      sums[k] += float(v)
  assert sums["tokens"] == len(tokens) - 1                  # every target exactly once
  # Targets: every document token, and the separators of documents 2 and 3 (1 byte each).
  assert sums["bytes"] == text_bytes + len(DOCS) - 1
  got = task.metric_ratios({k: jnp.asarray(v) for k, v in sums.items()})
  want = (len(tokens) - 1) * math.log2(vocab) / (text_bytes + len(DOCS) - 1)
  assert float(got["bits_per_byte"]) == pytest.approx(want, rel=1e-5)
  assert float(got["perplexity"]) == pytest.approx(vocab, rel=1e-4)


def test_train_iterator_resumes_from_its_state(tmp_path, configs_gpt_path):
  del configs_gpt_path
  c = _lm_config(tmp_path)
  prepared = data_lib.prepare(c.data, verbose=False)
  it = data_lib.train_iterator(c.data, prepared, 2, 0, 1, seed=3, seq_len=8)
  next(it), next(it)
  state = it.get_state()
  want = [next(it) for _ in range(3)]
  again = data_lib.train_iterator(c.data, prepared, 2, 0, 1, seed=3, seq_len=8)
  again.set_state(state)
  for w in want:
    got = next(again)
    for k in w:
      np.testing.assert_array_equal(got[k], w[k])


def test_a_real_train_step_through_the_loop(tmp_path, configs_gpt_path):
  del configs_gpt_path
  c = _lm_config(tmp_path, docs=_many_docs(), validation_fraction=0.2)
  result = registry.run(c, str(tmp_path / "work"))
  assert result["step"] == 2 and math.isfinite(result["train/loss"])
  assert 1.0 < result["eval/perplexity"] < 2 * 300 and result["eval/bits_per_byte"] > 0
  assert os.path.isdir(tmp_path / "work" / "checkpoints" / "2")
  task = registry.get_task(c)
  task.prepare(str(tmp_path / "work"))
  assert os.path.exists(os.path.join(task.tokenizer_dir, "tokenizer.json"))
  # The generate CLI finds the model and its tokenizer through the workdir's checkpoint.
  from bert_jax import generate  # pylint: disable=g-import-not-at-top
  assert generate.main(["--checkpoint", str(tmp_path / "work"), "--prompt", "The cat sat",
                        "--max_new_tokens", "4", "--top_p", "0.9"]) == 0


def test_the_preparation_command_builds_gpt_documents_on_beam(tmp_path, configs_gpt_path):
  """`python -m bert_jax.prepare` on an lm config: the documents stage on Beam, the
  BPE and token streams in process; the same documents as the in-process path."""
  from bert_jax.data.beam import util as beam_util  # pylint: disable=g-import-not-at-top
  c = _lm_config(tmp_path, validation_fraction=0.2)
  (beam_built,) = registry.prepare_data(
      c, beam=beam_util.BeamRun("DirectRunner", "--direct_running_mode=in_memory"),
      verbose=False)
  ref = data_lib.prepare(c.data, verbose=False)  # reuses all of it
  assert ref.streams_dir == beam_built.streams_dir
  documents = [p for p in (tmp_path / "data").glob("documents-*/*/1.0.0")]
  assert [p.parent.name for p in documents] == ["beam_documents_builder"]
  assert sum(s["documents"] for s in beam_built.stats.values()) == len(DOCS)


def test_init_from_a_bert_workdir_names_its_task(tmp_path, configs_gpt_path):
  """Was 'checkpoint ... does not fit this model:' and 40 lines of missing decoder arrays."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  del configs_gpt_path
  bert = tmp_path / "bert"
  ck = checkpoint.Checkpointer(str(bert / "checkpoints"), async_save=False)
  ck.save(4, {"params": {"bert": {"x": np.zeros((2,), np.float32)}}},
          {"task": "bert_pretraining",
           "model_config": dataclasses.asdict(get_model_config("bert/tiny"))})
  ck.close()
  task = registry.get_task(_lm_config(tmp_path))
  with pytest.raises(ValueError) as info:
    task.load_pretrained_params(str(bert), template={})
  assert str(info.value) == (
      f"config.init_from {bert} holds a 'bert_pretraining' checkpoint, not a GPT: give a GPT "
      "workdir (task lm) or a Hugging Face GPT-2 directory.")
  # The translation task's init_from takes the same check (checkpoint.load_task_params).
  from bert_jax.checkpoint import manager as ckpt_lib  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError) as info:
    ckpt_lib.load_task_params(str(bert), "translation", "a translation", "")
  assert str(info.value) == (
      f"config.init_from {bert} holds a 'bert_pretraining' checkpoint, not a translation: "
      "give a translation workdir (task translation).")
