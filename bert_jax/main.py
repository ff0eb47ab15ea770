"""Entry point: `python -m bert_jax.main --config configs/bert_tiny.py --workdir DIR`.

Installed (pip), the same is `bert-jax-train --config bert_jax/configs/bert_tiny.py
--workdir DIR` from any directory: a --config path that does not exist is looked up in
the installed package (bert_jax/configs/__init__.py).

Overrides: `--config.train.batch_size=512`; the config is locked, so a misspelled key
is an error that names it. Multi-host: launched once per host (see launch/), JAX's
distributed runtime is initialized from the cluster environment or the flags below.
"""
from __future__ import annotations

import sys

from absl import app, flags
from ml_collections import config_flags

from bert_jax.runtime import compile_cache
from bert_jax.cli import library_logs_at_warning, parse_flags  # the shared --config CLI parser (also bert_jax.aot)

FLAGS = flags.FLAGS
_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (get_config(arg)).",
                                          lock_config=True)
flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and TensorBoard.")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0 (multi-process).")
flags.DEFINE_integer("num_processes", None, "Number of processes (multi-process).")
flags.DEFINE_integer("process_id", None, "This process's index (multi-process).")
flags.DEFINE_integer("heartbeat_timeout", 100,
                     "Seconds without a heartbeat after which the others treat a process as "
                     "lost and exit (multi-process); a dead host ends the job, not hangs it.")
flags.DEFINE_string("compilation_cache", None, compile_cache.FLAG_HELP + (
    " A rerun after a preemption loads its compiled steps instead of compiling."))
flags.mark_flags_as_required(["config", "workdir"])


def _maybe_initialize_distributed():
  import os  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.hardware import platforms  # pylint: disable=g-import-not-at-top
  # Cross-process collectives between CPU devices (multi-process CPU runs, tests); it
  # does not affect GPU/TPU collectives. Must precede any backend initialization.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  # jax's preemption service installs a C++ SIGTERM handler that only records the notice
  # for multihost_utils.reached_preemption_sync_point, which nothing here calls: a SIGTERM
  # before the loop was swallowed (the run went on until SIGKILL). The loop's own handler
  # hears SIGTERM and Ctrl-C alike and every process agrees on the stop
  # (train/preemption.py, multihost.StopVote); before it, SIGTERM ends the process.
  jax.config.update("jax_enable_preemption_service", False)
  if FLAGS.coordinator_address:
    jax.distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id,
                               heartbeat_timeout_seconds=FLAGS.heartbeat_timeout)
  elif any(v in os.environ for v in ("SLURM_JOB_ID", "TPU_WORKER_HOSTNAMES",
                                     "JAX_COORDINATOR_ADDRESS")) and \
      int(os.environ.get("SLURM_NTASKS", "2")) > 1:
    # Cluster auto-detection (SLURM, GKE TPU pods, launch/tpu_pod.sh).
    jax.distributed.initialize(heartbeat_timeout_seconds=FLAGS.heartbeat_timeout)
  elif platforms.tpu_chips():
    # A Cloud TPU VM (gcloud tpu-vm create) keeps its slice's worker list in the VM's
    # metadata, not in the environment: jax's auto-detection reads it there. Without
    # this, a pod started by plain ssh ran every host as a one-process job.
    try:
      jax.distributed.initialize(heartbeat_timeout_seconds=FLAGS.heartbeat_timeout)
    except ValueError as e:  # jax found no cluster: a TPU host outside a pod slice
      logging.warning("TPU chips here but no TPU cluster found (%s): one process.", e)


def run(config, workdir: str):
  """What a run of `config` does: registry.run (the task's trainer, or predict mode),
  with config.export_hf's check before it, so a run that cannot be exported fails at
  once, and its export after a finished (not preempted) run (bert_jax/apps/export.py)."""
  from bert_jax import export  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  export_hf = config.get("export_hf") and config.get("mode", "train") == "train"
  if export_hf:
    export.check_export_hf(config)
  result = registry.run(config, workdir)
  if export_hf and not result.get("preempted"):
    export.export_hf(workdir)
  return result


def run_locked(config, workdir: str):
  """run() holding the workdir's lock (process 0; runtime/workdir_lock.py): a second run on
  the same workdir stops here, before it writes. Predict mode only reads the workdir and
  writes its own output file, so it runs beside training without the lock."""
  if config.get("mode", "train") == "predict":
    return run(config, workdir)
  from bert_jax.runtime import workdir_lock  # pylint: disable=g-import-not-at-top
  with workdir_lock.hold_agreed(workdir):
    return run(config, workdir)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from bert_jax.train import preemption  # pylint: disable=g-import-not-at-top
  preemption.HOLD_SIGTERM_AFTER_A_STOP = True  # this process ends with the run
  library_logs_at_warning()
  compile_cache.set_compilation_cache(FLAGS.compilation_cache)
  _maybe_initialize_distributed()
  config = _CONFIG.value
  from bert_jax.runtime import paths  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import progress
  progress.set_enabled(config.get("progress", True))
  from bert_jax import guards  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoint.restore_errors import CheckpointReadError  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoint.manager import CheckpointSaveError  # pylint: disable=g-import-not-at-top
  from bert_jax.train.writer import MetricsWriteError  # pylint: disable=g-import-not-at-top
  full_disk = (CheckpointSaveError, MetricsWriteError)
  try:
    paths.check_workdir(FLAGS.workdir)
    paths.check_config(config)  # init_from, data and predict paths
    # Settings that would destroy what is on disk, refused before anything is written.
    guards.check_run(config, FLAGS.workdir)
    result = run_locked(config, FLAGS.workdir)
  except (ValueError, FileNotFoundError, FloatingPointError, *full_disk) as e:
    # Printed once (an absl logging.error here showed every message twice on stderr).
    print(f"error: {e.strerror if isinstance(e, full_disk) else e}", file=sys.stderr)
    sys.exit(2)
  except CheckpointReadError as e:  # storage trouble at restore: retried, then one line
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except PermissionError as e:  # a read-only or foreign workdir (or data dir): one line
    print(f"error: cannot write {e.filename or FLAGS.workdir}: {e.strerror} (check the "
          "permissions of --workdir and config.data.data_dir; nothing was changed there).",
          file=sys.stderr)
    sys.exit(2)
  sys.exit(exit_status(result))


def exit_status(result) -> int:
  """0 for a finished or preempted (SIGTERM) run, whose scheduler requeues it; 130, the
  shell's code for Ctrl-C, for a run a user stopped (saved first): `main && next` must
  not go on to `next` with a half-trained model."""
  return 130 if isinstance(result, dict) and result.get("stopped_by") == "SIGINT" else 0


def entry():
  """The `bert-jax-train` console script (and `python -m bert_jax.main`)."""
  from bert_jax.runtime import flag_help  # pylint: disable=g-import-not-at-top
  flag_help.key_flags_in_help(__name__)  # a console script's --help lists the flags too
  app.run(main, flags_parser=parse_flags)


if __name__ == "__main__":
  entry()
