"""The settings that could destroy what is already on disk, checked in one place, before
a run writes its first byte.

`python -m bert_jax.main` calls `check_run(config, workdir)` right after parsing. Each
refusal is a ValueError of one line naming the field and what it would have destroyed:

* train.keep_checkpoints below 1: orbax's LatestN(0) deletes every checkpoint of the run;
* log, eval and checkpoint intervals out of range (the trainer's own count checks:
  train/loop.py's for the shared loop, word2vec/train.py's for word2vec);
* an output that is, or holds, a path the run reads: the workdir as its own `init_from`
  or data file, an input where the run writes (the workdir's checkpoints/, tokenizer/,
  hf/, metrics and predictions files), `predict.output_file` over `predict.input_file`.
  A data file of the user's own elsewhere in the workdir is left alone: the run writes
  only the names in WRITTEN.

The trainers keep their own checks for callers that skip main (library use); this module
only gathers them so that nothing is prepared or written before the first one fails.
"""
from __future__ import annotations

import os

from bert_jax.runtime import paths

# Config fields a run reads (never writes): an output may not be or hold any of them.
INPUT_FIELDS = ("init_from", "data.train_file", "data.eval_file", "data.test_file",
                "data.vocab_path", "data.vocab", "data.text_glob", "data.text_files",
                "predict.input_file")


# What a run writes in its workdir (loop, tasks, export_hf, word2vec): an input there
# would be overwritten or deleted.
WRITTEN = ("checkpoints", "tokenizer", "labels.json", "hf", "metrics.jsonl",
           "predictions.jsonl", "data/test.de", "data/test.en", "vectors.txt", "vectors.bin",
           "wandb", "wandb_run_id", ".bert_jax.lock")


field = paths.config_value  # config's value at a dotted key, or None


def _normalized(path: str) -> str:
  """A comparable form: an object-store URL without a trailing slash, a local path made
  absolute with symlinks resolved (two spellings of one directory compare equal)."""
  path = str(path)
  if paths.is_remote(path):
    return path.rstrip("/")
  return os.path.realpath(os.path.expanduser(path))


def covers(output: str, source: str) -> bool:
  """True when writing `output` (a file, or a directory the run writes into) could
  overwrite `source`: the same path, or `source` inside the `output` directory."""
  out, src = _normalized(output), _normalized(source)
  return src == out or src.startswith(out.rstrip("/") + "/")


def inputs(config) -> list[tuple[str, str]]:
  """(field, path) of every input path the config sets; comma lists (translation's
  "x.src,x.tgt") give one entry a path."""
  found = []
  for key in INPUT_FIELDS:
    value = field(config, key)
    if isinstance(value, str) and value:
      found += [(key, p) for p in value.split(",") if p]
  return found


def check_outputs(config, workdir: str) -> None:
  """A ValueError when the workdir or predict.output_file is, or holds, an input."""
  predict = config.get("mode", "train") == "predict"
  outputs = []
  if workdir and not predict:  # predict writes only its output file, not the workdir
    outputs += [("--workdir", workdir)]
    outputs += [(f"--workdir's {name}", os.path.join(workdir, name)) for name in WRITTEN]
  if predict:
    outputs.append(("config.predict.output_file", field(config, "predict.output_file")
                    or os.path.join(workdir, "predictions.jsonl")))
  for out_name, out_path in outputs:
    for in_key, in_path in inputs(config):
      if out_name == "--workdir" and out_path == workdir and not covers(in_path, workdir):
        continue  # an input inside the workdir but outside what the run writes
      if covers(out_path, in_path):
        how = "is" if _normalized(out_path) == _normalized(in_path) else "holds"
        raise ValueError(f"{out_name} {out_path} {how} config.{in_key} {in_path}: the run "
                         "would write over what it reads; give another output path.")


def check_intervals(config) -> None:
  """The trainer's count checks (intervals, steps, learning rate), before any data."""
  if config.get("task") == "word2vec":
    from bert_jax.word2vec import train  # pylint: disable=g-import-not-at-top
    train.check_counts(config)
  elif "train" in config:
    from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
    loop.check_counts(config.train)


def check_run(config, workdir: str) -> None:
  """Every check above, in the order a user would fix them; the first failure raises."""
  from bert_jax.checkpoint import manager  # pylint: disable=g-import-not-at-top
  keep = field(config, "train.keep_checkpoints")
  manager.check_keep(1 if keep is None else keep)
  if config.get("mode", "train") == "train":
    check_intervals(config)
  check_outputs(config, workdir)
