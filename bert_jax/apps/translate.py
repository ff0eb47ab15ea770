r"""Translate text with a trained translation workdir (configs/translation.py).

  python -m bert_jax.translate --workdir workdirs/numbers --input test.de --output hyp.en \
      [--beam_size 4] [--alpha 0.6] [--checkpoint best|latest|STEP] [--matmul_dtype bfloat16]

One sentence per line; output line i is the translation of input line i ("-" reads
stdin / writes stdout). Empty lines give empty outputs, over-long sources are cut and
non-UTF-8 bytes replaced; each is counted in the summary on stderr. A missing or
non-translation checkpoint is a clear error (exit code 2); the output file is written
to a temporary name first, so a failed run leaves an existing output as it was.
"""
from __future__ import annotations

import functools
import os
import sys
import time

from absl import app, flags
import jax
import ml_collections
import numpy as np

from bert_jax import cli
from bert_jax.runtime import compile_cache
from bert_jax.runtime import paths

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """The CLI's flags, defined only when it runs (tests and the export import this module
  beside main.py, which has its own --workdir)."""
  flags.DEFINE_string("workdir", None, "A configs/translation.py training workdir.")
  flags.DEFINE_string("input", "-", "Source sentences, one per line ('-': stdin).")
  flags.DEFINE_string("output", "-", "Translations, one per line ('-': stdout).")
  flags.DEFINE_integer("beam_size", 4, "Beam width; 1 is greedy search.")
  flags.DEFINE_float("alpha", 0.6, "GNMT length penalty exponent ((5 + len) / 6)^alpha.")
  flags.DEFINE_string("checkpoint", "best", "best (by the run's best_metric) | latest | a step.")
  flags.DEFINE_integer("batch_size", 64, "Sentences per decoding batch.")
  flags.DEFINE_enum("matmul_dtype", None, ["bfloat16", "float32"],
                    "Matmul operands in this dtype (float32 accumulation); default: the "
                    "checkpoint's config. bfloat16 decodes ~1.35x faster on CPU (half the "
                    "weight bytes a step; BLEU effect in bench/RESULTS.md \"Decoding\").")
  flags.DEFINE_string("reference", "", "Optional reference translations (line-aligned with "
                      "--input): corpus BLEU / chrF (sacreBLEU) and exact match on stderr.")
  flags.DEFINE_string("compilation_cache", None, compile_cache.FLAG_HELP + (
      " A repeated call loads its compiled search instead of compiling."))


class TranslateError(Exception):
  """Bad usage or input that stops the run (exit code 2)."""


def checkpoint_dir(workdir: str, which: str) -> str:
  """workdir/checkpoints/<step> for `which` (best | latest | a step number)."""
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  directory, steps = checkpoint.checkpoint_steps(workdir)
  if not steps:
    raise TranslateError(f"no checkpoint in {directory}: train one first with "
                         "`python -m bert_jax.main --config configs/translation.py "
                         f"--workdir {workdir}`.")
  meta = checkpoint.read_meta(directory / str(steps[-1]))
  if meta.get("task") != "translation":
    raise TranslateError(f"{workdir} holds a {meta.get('task')!r} checkpoint, not a "
                         "translation one (configs/translation.py).")
  try:
    return str(directory / str(checkpoint.select_step(directory, steps, which,
                                                      meta["config"]["train"])))
  except ValueError as e:
    raise TranslateError(str(e)) from None


def load(workdir: str, which: str = "best", matmul_dtype: str | None = None):
  """(TranslationTask, params, step dir) of a workdir's checkpoint; `matmul_dtype`
  overrides the model's (config.model.matmul_dtype), e.g. "bfloat16" to decode faster."""
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.translation.task import TranslationTask  # pylint: disable=g-import-not-at-top
  step_dir = checkpoint_dir(workdir, which)
  meta = checkpoint.read_meta(step_dir)
  config = ml_collections.ConfigDict(meta["config"])
  if matmul_dtype is not None:
    config.model.matmul_dtype = matmul_dtype
  task = TranslationTask(config)
  tokenizer_dir = meta.get("tokenizer_dir") or os.path.join(workdir, "tokenizer")
  if not os.path.exists(os.path.join(tokenizer_dir, "tokenizer.json")):
    raise TranslateError(f"{tokenizer_dir}/tokenizer.json (the run's vocabulary) is missing.")
  task.load_tokenizer(tokenizer_dir)
  _, params, _ = checkpoint.load_params_for_inference(step_dir)
  from bert_jax.decoding import weights as decode_weights  # pylint: disable=g-import-not-at-top
  return task, decode_weights.cast_kernels(params, task.model_config), step_dir


def translate(task, params, lines_path: str, beam_size: int, alpha: float,
              batch_size: int) -> tuple[list[str], object]:
  """(one translation per input line, SkipLog) of a file or "-"."""
  lines, features = task.read_input(lines_path)
  outputs = {"feature_index": [], "hyp": []}
  if len(features["src_ids"]):
    fn = jax.jit(functools.partial(task.search, beam_size=beam_size, alpha=alpha))
    for batch in task.predict_batches(features, batch_size):
      outputs["hyp"].append(np.asarray(fn(params, batch["src_ids"])))
      outputs["feature_index"].append(batch["feature_index"])
    outputs = {k: np.concatenate(v) for k, v in outputs.items()}
  else:
    outputs = {"feature_index": np.zeros(0, np.int64), "hyp": np.zeros((0, 1), np.int32)}
  texts = [r["translation"] for r in task.prediction_records(lines, features, outputs)]
  return texts, features["log"]


def _write(path: str, texts: list[str]) -> None:
  body = "".join(t + "\n" for t in texts)
  if path == "-":
    sys.stdout.write(body)
    sys.stdout.flush()
    return
  paths.write_atomically(path, body)  # local or gs://; the old file stays on an error


def main(argv):
  del argv
  cli.library_logs_at_warning()
  compile_cache.set_compilation_cache(FLAGS.compilation_cache,
                                      compile_cache.INFERENCE_MIN_COMPILE_SECS)
  if not FLAGS.workdir:
    print("translate: error: --workdir is required.", file=sys.stderr)
    sys.exit(2)
  if FLAGS.beam_size < 1:
    print(f"translate: error: --beam_size must be >= 1, got {FLAGS.beam_size}.",
          file=sys.stderr)
    sys.exit(2)
  if FLAGS.reference and not os.path.isfile(FLAGS.reference):
    print(f"translate: error: --reference {FLAGS.reference} does not exist.", file=sys.stderr)
    sys.exit(2)
  clash = cli.overwritten_input(FLAGS.output, [("--input", FLAGS.input),
                                               ("--reference", FLAGS.reference)])
  if clash:
    print(f"translate: error: {clash}.", file=sys.stderr)
    sys.exit(2)
  try:
    task, params, step_dir = load(FLAGS.workdir, FLAGS.checkpoint, FLAGS.matmul_dtype)
    t0 = time.perf_counter()
    texts, log = translate(task, params, FLAGS.input, FLAGS.beam_size, FLAGS.alpha,
                           FLAGS.batch_size)
  except (TranslateError, FileNotFoundError, ValueError) as e:
    print(f"translate: error: {e}", file=sys.stderr)
    sys.exit(2)
  dt = time.perf_counter() - t0
  _write(FLAGS.output, texts)
  print(f"translate: {len(texts)} lines with {step_dir} (beam {FLAGS.beam_size}, alpha "
        f"{FLAGS.alpha}) in {dt:.1f}s; {log.summary()}", file=sys.stderr)
  if FLAGS.reference:
    print(f"translate: {score(texts, FLAGS.reference)}", file=sys.stderr)


def score(texts: list[str], reference_path: str) -> str:
  """"BLEU x chrF y exact z (signature)" of `texts` against a reference file."""
  from bert_jax.tasks.translation import metrics  # pylint: disable=g-import-not-at-top
  with open(reference_path, encoding="utf-8") as f:
    refs = f.read().splitlines()
  s = metrics.corpus_scores(texts, refs)
  return (f"BLEU {s['bleu']:.2f} chrF {s['chrf']:.2f} exact {100 * s['exact_match']:.1f}% "
          f"of {len(refs)} ({s['signature']})")


def entry():
  """The `bert-jax-translate` console script (and `python -m bert_jax.translate`)."""
  from bert_jax import hardware  # pylint: disable=g-import-not-at-top
  hardware.configure()  # before jax starts a backend
  _define_flags()
  from bert_jax.runtime import flag_help  # pylint: disable=g-import-not-at-top
  flag_help.key_flags_in_help(__name__)  # a console script's --help lists the flags too
  app.run(main)


if __name__ == "__main__":
  entry()
