"""What a pretraining run learned, next to what counting alone gets (the end of `make demo`).

  python -m bert_jax.demo_report --workdir DIR [--text "the [MASK] was killed ." ...]

(a) Held-out MLM accuracy of the workdir's last checkpoint on every masked position of
the validation split (the loader's fixed eval masks, as the loop's evaluation uses),
next to two baselines scored on exactly those positions:
  - most frequent: always the most frequent train token (the unigram prior's top-1);
  - bigram: the most frequent successor, in the training documents, of the token left of
    the position as the model sees it (so a [MASK] or a replaced neighbour is what the
    bigram model sees too); a neighbour never seen in training falls back to the most
    frequent token.
(b) Fill-mask top-5 for each text, next to the unigram prior's top-5 (what a model that
ignores the context says), and whether the text occurs in the training documents.
Bad input prints one line `demo_report: error: ...` and exits with status 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from typing import Optional, Sequence

import jax
import ml_collections
import numpy as np

from bert_jax import cli
from bert_jax.inference.loader import InputError

# What `make demo` fills (held out from the embedded corpus; the default of --text).
DEMO_TEXTS = ("the prime minister said the [MASK] would be announced today .",
              "the [MASK] was killed in the attack .",
              "the government has [MASK] the new laws .")


@dataclasses.dataclass
class Counts:
  """Token statistics of the training documents."""
  unigram: np.ndarray     # [V] int64 counts (specials zeroed)
  successor: np.ndarray   # [V] int32: the most frequent next token, -1 if never followed
  texts: list             # the training documents' lines, lowercased (held-out check)

  @property
  def most_frequent(self) -> int:
    return int(np.argmax(self.unigram))

  def bigram(self, left: np.ndarray) -> np.ndarray:
    """left [...] token ids -> the bigram model's prediction for the next token [...]."""
    guess = self.successor[np.clip(left, 0, len(self.successor) - 1)]
    return np.where(guess >= 0, guess, self.most_frequent).astype(np.int32)


def special_ids(tokenizer) -> list[int]:
  """Bracketed tokens ([PAD], [CLS], [MASK], ...): never masked, never a prediction."""
  vocab = tokenizer.get_vocab(with_added_tokens=True)
  return [i for t, i in vocab.items() if len(t) > 2 and t[0] == "[" and t[-1] == "]"]


def count_tokens(lines: Sequence[str], tokenizer, vocab_size: int) -> Counts:
  """Unigram and bigram counts over the lines (sentences) of the training documents."""
  specials = special_ids(tokenizer)
  encoded = tokenizer.encode_batch(list(lines), add_special_tokens=False)
  unigram = np.zeros(vocab_size, np.int64)
  prev, nxt = [], []
  for e in encoded:
    ids = np.asarray(e.ids, np.int64)
    unigram += np.bincount(ids, minlength=vocab_size)[:vocab_size]
    prev.append(ids[:-1])
    nxt.append(ids[1:])
  unigram[specials] = 0
  prev, nxt = np.concatenate(prev), np.concatenate(nxt)
  pairs, counts = np.unique(prev * vocab_size + nxt, return_counts=True)
  p, n = pairs // vocab_size, pairs % vocab_size
  # Per left token, the successor with the highest count (ties: the lowest id).
  order = np.lexsort((n, -counts, p))
  first = order[np.r_[True, p[order][1:] != p[order][:-1]]]
  successor = np.full(vocab_size, -1, np.int32)
  successor[p[first]] = n[first]
  return Counts(unigram=unigram, successor=successor, texts=[s.lower() for s in lines])


def train_lines(documents_dir: str) -> list[str]:
  """The non-empty lines of the prepared training documents."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  source = tfds.builder_from_directory(documents_dir).as_data_source(split="train")
  lines = []
  for i in range(len(source)):
    lines.extend(s for s in source[i]["text"].decode("utf-8").split("\n") if s.strip())
  return lines


def held_out_accuracy(task, params, eval_batches, counts: Counts, mask_id: int) -> dict:
  """Accuracy of the model and of the two baselines on the same masked positions."""
  predict = jax.jit(lambda p, b: task.apply(p, b, None, train=False)["mlm_logits"].argmax(-1))
  hits = {"model": 0.0, "most frequent": 0.0, "bigram": 0.0}
  total, left_masked = 0.0, 0.0
  for batch in eval_batches:
    w = batch["masked_lm_weights"]                                    # [B, P]
    target = batch["masked_lm_ids"]
    pos = batch["masked_lm_positions"]
    left = np.take_along_axis(batch["input_ids"], np.maximum(pos - 1, 0), axis=1)  # [B, P]
    guesses = {"model": np.asarray(predict(params, batch)),
               "most frequent": np.full_like(target, counts.most_frequent),
               "bigram": counts.bigram(left)}
    for name, guess in guesses.items():
      hits[name] += float(np.sum((guess == target) * w))
    total += float(np.sum(w))
    left_masked += float(np.sum((left == mask_id) * w))
  if not total:
    raise InputError("the validation split has no masked positions")
  out = {name: h / total for name, h in hits.items()}
  out.update(positions=int(total), left_masked=left_masked / total)
  return out


def is_held_out(text: str, counts: Counts) -> bool:
  """True unless the text (its [MASK]s matching any one word) is in a training line."""
  words = [w for w in text.lower().split() if w not in ("[cls]", "[sep]")]
  pattern = re.compile(r"\s+".join(r"\S+" if w == "[mask]" else re.escape(w) for w in words))
  return not any(pattern.search(line) for line in counts.texts)


def load_run(workdir: str):
  """(PretrainingTask with its data prepared, params, run config) of a pretraining workdir."""
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  from bert_jax.layers.param_layout import scan_to_unrolled, unrolled_to_scan  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.pretraining import PretrainingTask  # pylint: disable=g-import-not-at-top
  try:
    _, params, _, meta = checkpoint.load_params_for_inference(workdir, return_meta=True)
  except (FileNotFoundError, ValueError) as e:  # ValueError: a word2vec workdir
    raise InputError(str(e)) from e
  if meta.get("task") != "bert_pretraining":
    raise InputError(f"{workdir} is a {meta.get('task')} run; the report needs a "
                     "bert_pretraining workdir")
  config = ml_collections.ConfigDict(meta["config"])
  task = PretrainingTask(config)
  task.prepare(workdir)  # the run's prepared data: cached, so only read back
  params = (unrolled_to_scan if task.model_config.scan_layers else scan_to_unrolled)(params)
  return task, params, config


def report(workdir: str, texts: Sequence[str], top_k: int = 5, out=None) -> dict:
  """Prints (a) and (b) (module docstring) to `out` (default: sys.stdout); returns the
  numbers."""
  out = sys.stdout if out is None else out
  from bert_jax import fill_mask as fill_mask_cli  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import fill_mask, loader  # pylint: disable=g-import-not-at-top
  task, params, config = load_run(workdir)
  prepared = next(iter(task._prepared.values()))  # pylint: disable=protected-access
  tokenizer = prepared.tokenizer()
  counts = count_tokens(train_lines(prepared.documents_dir), tokenizer, prepared.vocab_size)
  phase = dict((config.train.get("phases") or [{}])[0])
  eval_batches = task.eval_iterator(phase, int(config.train.batch_size), 0, 1)
  acc = held_out_accuracy(task, params, eval_batches, counts, prepared.special.mask)

  p = lambda s: print(s, file=out)
  mf = tokenizer.id_to_token(counts.most_frequent)
  p(f"\nheld-out MLM accuracy on the {acc['positions']} masked positions of the validation "
    f"split ({100 * acc['left_masked']:.0f}% have a masked left neighbour):")
  p(f"  model                      {acc['model']:.4f}")
  p(f"  most frequent token ({mf!r}) {acc['most frequent']:.4f}"
    f"   model / most frequent = {acc['model'] / max(acc['most frequent'], 1e-9):.2f}x")
  p(f"  bigram (left neighbour)    {acc['bigram']:.4f}"
    f"   model - bigram = {acc['model'] - acc['bigram']:+.4f}")

  model = loader.load(workdir)
  fill_mask.check_mlm_head(model, "--workdir")
  prior = counts.unigram / counts.unigram.sum()
  prior_top = np.argsort(-prior, kind="stable")[:top_k]
  prior_line = "  ".join(f"{tokenizer.id_to_token(int(i))} {prior[i]:.3f}" for i in prior_top)
  fills = []
  for text in texts:
    masks = fill_mask.fill(model, text, top_k)
    fills.append(masks)
    held = "held out" if is_held_out(text, counts) else "IN THE TRAINING DOCUMENTS"
    p(f"\n{text}   ({held})")
    p("\n".join(fill_mask_cli.mask_lines(masks, " model")))
    p(f"  unigram prior: {prior_line}")
  return {"accuracy": acc, "fills": fills, "most_frequent": mf}


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m bert_jax.demo_report",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", required=True, help="a bert_pretraining workdir")
  parser.add_argument("--text", action="append",
                      help="a text with [MASK] to fill (repeatable; default: the demo's "
                      "three held-out sentences, DEMO_TEXTS)")
  parser.add_argument("--top_k", type=int, default=5)
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = cli.parse_args(build_parser(), argv)
  if isinstance(args, int):
    return args
  from bert_jax import fill_mask as fill_mask_cli  # pylint: disable=g-import-not-at-top
  try:
    fill_mask_cli.check_top_k(args.top_k)
    report(args.workdir, args.text or DEMO_TEXTS, args.top_k)
  except InputError as e:
    print(f"demo_report: error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
