"""Compile a config's steps for a TPU topology before booking it.

  python -m bert_jax.aot --config configs/bert_large.py --topology v5e:4x4 \
      --config.train.batch_size=1024 --output_dir /tmp/aot_bert_large

Prints the per-chip report (bert_jax/aot/report.py), with the TPU compiler's estimate of
each step's time (bert_jax/aot/cost.py; --nocost skips it), and writes report.json plus the
compiled HLO text to --output_dir (local or gs://). Every task: those of the shared loop
(pretraining, fine-tuning, translation, GPT: train and eval steps) and word2vec (its
sparse train step; --vocab_size sets its table rows). Exit code 2 with one line naming
the dominant term when a step does not fit, or on a bad config or topology.
"""
from __future__ import annotations

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from bert_jax.aot import check as check_lib
from bert_jax.aot import report as report_lib

FLAGS = flags.FLAGS
_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (get_config(arg)).",
                                          lock_config=True)
flags.DEFINE_string("topology", None, "TPU topology, e.g. v5e:4x4, v5p:4x4x4, v5e-256.")
flags.DEFINE_string("output_dir", "", "Where report.json and the HLO text go (optional).")
flags.DEFINE_list("steps", list(check_lib.STEPS), "Steps to compile: train, eval.")
flags.DEFINE_integer("vocab_size", 0, "word2vec only: the vocabulary (table rows) to plan "
                     "for, as the corpus will give it (default 1,000,000).")
flags.DEFINE_bool("cost", True, "Add the TPU compiler's estimate of each step (flops, bytes, "
                  "seconds, est. MFU per chip; bert_jax/aot/cost.py): one or two more "
                  "compiles per step.")
flags.mark_flags_as_required(["config", "topology"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  try:
    report = check_lib.check(_CONFIG.value, FLAGS.topology, FLAGS.steps, FLAGS.output_dir,
                             config_name=config_flags.get_config_filename(FLAGS["config"]),
                             vocab_size=FLAGS.vocab_size, cost=FLAGS.cost)
  except report_lib.DoesNotFitError as e:
    print(report_lib.format_report(e.report))
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  print(report_lib.format_report(report))


def entry():
  """The `bert-jax-aot` console script."""
  from bert_jax import cli  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import flag_help  # pylint: disable=g-import-not-at-top
  flag_help.key_flags_in_help(__name__)  # a console script's --help lists the flags too
  app.run(main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  entry()
