"""The preparation command (`python -m bert_jax.prepare`, `bert-jax-prepare`).

  python -m bert_jax.prepare --config configs/bert_base.py \
      --config.data.corpus=text --config.data.text_files='/corpus/*.txt' \
      [--beam_runner=DirectRunner --beam_options="--direct_running_mode=multi_processing
       --direct_num_workers=8"]

Prepares what training with the same --config would (every phase's sequence length for
BERT pretraining; documents, BPE and token streams for GPT's `lm` task) into the same
config-hashed directories, and trains nothing: the training run then finds them done.
Without --beam_runner the stages run here, as training would run them; with it, as Beam
pipelines on that runner (documents, vocabulary and instances for BERT; documents for
`lm`, whose BPE and streams stay in process). Which runners can write which data_dir:
beam_util.BeamRun.check_data_dir (DataflowRunner needs a gs:// data_dir, whose levels the
workers write into the bucket: data/beam/remote.py).
"""
from __future__ import annotations

import logging as std_logging
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from bert_jax.cli import parse_flags
from bert_jax.data.beam import util as beam_util
from bert_jax.tasks import registry

FLAGS = flags.FLAGS
_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (get_config(arg)).",
                                          lock_config=True)
flags.DEFINE_enum("beam_runner", None, list(beam_util.RUNNERS),
                  "Run the stages as Apache Beam pipelines on this runner; unset: in process.")
flags.DEFINE_string("beam_options", "",
                    "Beam pipeline options, one shell-quoted string, e.g. "
                    "'--direct_running_mode=multi_processing --direct_num_workers=2' or "
                    "'--flink_master=host:8081 --environment_type=LOOPBACK'.")
flags.mark_flags_as_required(["config"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not FLAGS["verbosity"].present:  # library INFO lines (tfds, Beam: one per bundle)
    logging.set_verbosity(logging.WARNING)
    std_logging.getLogger("apache_beam").setLevel(std_logging.WARNING)
  from bert_jax.runtime import paths  # pylint: disable=g-import-not-at-top
  try:
    beam = beam_util.BeamRun(FLAGS.beam_runner, FLAGS.beam_options) if FLAGS.beam_runner else None
    if FLAGS.beam_options and not beam:
      raise ValueError("--beam_options without --beam_runner: name the runner.")
    paths.check_config(_CONFIG.value)
    registry.prepare_data(_CONFIG.value, beam=beam)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


def entry():
  """`bert-jax-prepare` / `python -m bert_jax.prepare`: prepare, train nothing."""
  from bert_jax.runtime import flag_help  # pylint: disable=g-import-not-at-top
  flag_help.key_flags_in_help(__name__)  # a console script's --help lists the flags too
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  entry()
