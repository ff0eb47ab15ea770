"""End-to-end training-system tests: resume, SIGTERM, checkpoints across meshes, errors."""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import ml_collections
import numpy as np
import pytest

from bert_jax.checkpoint import manager as ckpt_lib
from bert_jax.runtime import parallel
from bert_jax.tasks.pretraining import PretrainingTask
from bert_jax.tasks import registry
from bert_jax.train import loop, optim, preemption
from tests import procs
from tests.train.conftest import random_batch, tiny_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(ROOT, "tests", "testdata", "data", "tiny_corpus.txt")


def e2e_config(data_dir: str, num_steps: int = 6) -> ml_collections.ConfigDict:
  from bert_jax.train.defaults import data_config
  c = tiny_config(num_steps=num_steps, batch_size=8, log_every=1, eval_every=0,
                  checkpoint_every=2, keep_checkpoints=5, async_checkpoints=False)
  c.model.vocab_size = 256
  c.data = data_config()
  c.data.update(dict(corpus="text", text_files=CORPUS, data_dir=data_dir, vocab_size=256,
                     max_seq_length=16, max_predictions_per_seq=4, dupe_factor=10,
                     validation_fraction=0.1, prepare_processes=1))
  c.mesh_shape = (2, 2, 2)
  return c


def _losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(l) for l in f]
  return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("uninterrupted"))
  config = e2e_config(data_dir)
  result = loop.train_and_evaluate(config, workdir, registry.get_task(config))
  return workdir, result


def test_runs_logs_and_checkpoints(uninterrupted):
  workdir, result = uninterrupted
  assert result["step"] == 6 and not result["preempted"]
  losses = _losses(workdir)
  assert sorted(losses) == [1, 2, 3, 4, 5, 6] and all(np.isfinite(list(losses.values())))
  assert sorted(ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).all_steps()) == [
      2, 4, 6]
  assert any(f.startswith("events.out.tfevents") for f in os.listdir(workdir))


def _flags(config, workdir):
  flags = ["--config=configs/bert_tiny.py", f"--workdir={workdir}"]
  d, t, m = config.data, config.train, config.model
  for k in ("corpus", "text_files", "data_dir", "vocab_size", "max_seq_length",
            "max_predictions_per_seq", "dupe_factor", "validation_fraction"):
    flags.append(f"--config.data.{k}={d[k]}")
  for k in ("num_steps", "batch_size", "log_every", "eval_every", "eval_steps",
            "checkpoint_every", "learning_rate", "warmup_steps", "async_checkpoints"):
    flags.append(f"--config.train.{k}={t[k]}")
  for k in ("vocab_size", "hidden_size", "num_heads", "mlp_dim", "max_len", "dropout_rate",
            "attention_dropout_rate"):
    flags.append(f"--config.model.{k}={m[k]}")
  flags.append("--config.mesh_shape=(2,2,2)")
  return flags


@pytest.mark.slow
def test_sigterm_saves_and_resume_matches_uninterrupted(uninterrupted, data_dir, tmp_path,
                                                        capsys):
  """SIGTERM to the CLI saves and exits 0; the rerun (here in this process: the same
  train_and_evaluate the CLI calls, without a second interpreter start) resumes."""
  ref_dir, _ = uninterrupted
  workdir = str(tmp_path / "interrupted")
  config = e2e_config(data_dir)
  # The CLI run also profiles steps 2-3 (train.profile_steps; a fresh process: libtpu,
  # which an AOT test loads into a pytest worker, makes the profiler crash on CPU).
  first = procs.main(_flags(config, workdir) + ["--config.train.profile_steps=2"],
                     signal_at="step 3/6", sig=signal.SIGTERM)
  out = first.output
  assert first.returncode == 0, out
  assert "SIGTERM: saved step" in out
  stopped_at = max(ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).all_steps())
  assert 3 <= stopped_at < 6
  _check_profile(workdir)
  result = loop.train_and_evaluate(config, workdir, registry.get_task(config))
  out = capsys.readouterr().out
  assert result["step"] == 6, out
  assert f"resumed from" in out and f"at step {stopped_at}" in out
  ref, got = _losses(ref_dir), _losses(workdir)
  for step in range(1, 7):
    assert got[step] == pytest.approx(ref[step], abs=1e-6), (step, got, ref)


def _check_profile(workdir):
  """train.profile_steps: a trace TensorBoard's profile plugin reads (WORKDIR/plugins/
  profile/RUN/*.xplane.pb) whose step events name steps 2 and 3."""
  import glob, gzip  # pylint: disable=g-import-not-at-top,multiple-import
  runs = glob.glob(os.path.join(workdir, "plugins", "profile", "*"))
  assert len(runs) == 1 and glob.glob(os.path.join(runs[0], "*.xplane.pb"))
  with gzip.open(glob.glob(os.path.join(runs[0], "*.trace.json.gz"))[0]) as f:
    events = json.load(f)["traceEvents"]
  assert sorted(e["args"]["step_num"] for e in events if e.get("name") == "train") == [
      "2", "3"]


def test_a_first_ctrl_c_asks_for_a_save_a_second_interrupts(capsys):
  """Ctrl-C takes SIGTERM's path (the loop saves the step and exits 0; the test above),
  where it was a KeyboardInterrupt that lost the steps since the last save; a second
  Ctrl-C interrupts at once. The handlers before are restored."""
  before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
  with preemption.Preemption() as preempt:
    os.kill(os.getpid(), signal.SIGINT)
    assert preempt.requested and preempt.name == "SIGINT"
    assert "Ctrl-C: saving at the end of the step in progress, then exiting" in (
        capsys.readouterr().out)
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGINT)
  assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
  with preemption.Preemption() as preempt:
    os.kill(os.getpid(), signal.SIGTERM)
    assert preempt.requested and preempt.name == "SIGTERM"


def test_the_command_line_ignores_sigterm_once_its_run_has_stopped(monkeypatch):
  """After a stop (its own signal or the processes' vote), the command line's process
  ignores SIGTERM until it exits (SIG_IGN: a Python handler is reset to the default during
  interpreter shutdown, where a SIGTERM 1 s after another host's killed a stopped process
  with -15; scripts/multihost.py --stop). A run that did not stop, and any in-process
  caller, get their handlers back."""
  before = signal.getsignal(signal.SIGTERM)
  try:
    with preemption.Preemption() as preempt:
      preempt.stopping = True
    assert signal.getsignal(signal.SIGTERM) is before  # in process: put back
    monkeypatch.setattr(preemption, "HOLD_SIGTERM_AFTER_A_STOP", True)
    with preemption.Preemption():
      pass
    assert signal.getsignal(signal.SIGTERM) is before  # not stopped: put back
    with preemption.Preemption() as preempt:
      preempt.stopping = True
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGTERM)  # ignored: this test goes on
  finally:
    signal.signal(signal.SIGTERM, before)


@pytest.mark.slow
def test_three_random_sigkills_each_rerun_resumes_and_the_run_ends_exactly(
    uninterrupted, data_dir, tmp_path):
  """scripts/fault_campaign.py's case in small: async saves on, SIGKILL at a seeded random
  moment of the training steps (and saves), rerun, twice more, then a rerun to the end.
  Every step's loss equals the uninterrupted run's, each step is logged once, every
  checkpoint left restores and no half-written save remains."""
  ref_dir, _ = uninterrupted
  config = e2e_config(data_dir)
  config.train.async_checkpoints = True  # kills can land inside a save
  workdir = str(tmp_path / "run")
  flags = _flags(config, workdir)
  with open(os.path.join(ref_dir, "metrics.jsonl")) as f:
    step_times = {r["step"]: r["time"] for r in map(json.loads, f) if "train/loss" in r}
  rng = random.Random(0)
  kills = []
  for _ in range(3):
    # The window a run spends in its steps: from the first step it logs (one after the
    # newest checkpoint) to the reference's last step, measured in the reference's times.
    saved = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).all_steps()
    first = min(max(saved, default=0) + 1, 6)
    moment = rng.uniform(0.0, step_times[6] - step_times[first])
    run = procs.main(flags, kill_after=moment, after_first_step=True)
    kills.append((first, round(moment, 3), run.returncode))
    assert run.returncode in (0, -signal.SIGKILL), run.output
    if run.returncode == 0:
      break  # it finished before the kill: what is left is the rerun of a finished run
  # The rerun to the end in this process (the CLI's own train_and_evaluate).
  result = loop.train_and_evaluate(config, workdir, registry.get_task(config))
  assert result["step"] == 6, kills
  ref, got = procs.train_losses(ref_dir), procs.train_losses(workdir)
  assert sorted(got) == sorted(ref) == [("loss", s) for s in range(1, 7)], kills
  for key in ref:
    assert got[key] == pytest.approx(ref[key], abs=1e-6), (key, kills)
  assert procs.duplicate_steps(workdir) == 0, kills
  steps, problems = procs.checkpoints_ok(workdir)
  assert steps[-1] == 6 and not problems, (steps, problems, kills)


def test_a_corrupt_newest_checkpoint_is_moved_aside_and_the_rerun_finishes_exactly(
    uninterrupted, data_dir, tmp_path, caplog):
  """Killed after step 6's metrics but before its save, checkpoint 4 half-written: the
  rerun falls back to 2, moves 4 aside (nothing deleted), saves 4 and 6 again with the
  uninterrupted losses, and logs every step once."""
  ref_dir, _ = uninterrupted
  copy = tmp_path / "run"
  shutil.copytree(ref_dir, copy)
  ckdir = copy / "checkpoints"
  shutil.rmtree(ckdir / "6")
  for root, _, files in os.walk(ckdir / "4"):
    for f in files:
      path = os.path.join(root, f)
      with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 2)
  with open(copy / "metrics.jsonl", "a") as f:
    f.write('{"step": 7, "lo')  # the line the kill cut
  config = e2e_config(data_dir)
  with caplog.at_level("WARNING"):
    result = loop.train_and_evaluate(config, str(copy), registry.get_task(config))
  assert result["step"] == 6
  aside = [p.name for p in ckdir.iterdir() if p.name.startswith("4.corrupt-")]
  assert len(aside) == 1 and "moved the unreadable checkpoint step 4 to" in caplog.text
  assert ckpt_lib.Checkpointer(str(ckdir)).all_steps() == [2, 4, 6]
  rows = [json.loads(l) for l in (copy / "metrics.jsonl").read_text().splitlines()]
  steps = [r["step"] for r in rows if "train/loss" in r]
  assert steps == [1, 2, 3, 4, 5, 6]  # each once: 3..6 of the killed run were dropped
  ref = _losses(ref_dir)
  for r in rows:
    if "train/loss" in r:
      assert r["train/loss"] == pytest.approx(ref[r["step"]], abs=1e-6), r["step"]


def _fill(disk):
  """Fills the filesystem `disk` to 0 bytes free."""
  with open(disk / "filler", "wb") as f:
    try:
      while True:
        f.write(b"\0" * 2**20)
        f.flush()
    except OSError:
      pass


def test_a_full_disk_stops_the_save_in_one_line_and_the_rerun_resumes(
    uninterrupted, data_dir, tmp_path, monkeypatch):
  """The disk fills up once checkpoint 2 is saved (a 64 MiB tmpfs the test mounts; where
  mounting is not allowed, an injected ENOSPC at step 4): the next save stops the run
  with one error naming the directory and the free space, checkpoint 2 intact; with
  space freed the rerun resumes from 2 with the uninterrupted losses.

  The disk is filled in the loop's own thread, as the save of step 2 returns (finished):
  a filler thread that waited for the step's directory could be outrun by steps 3 and 4
  on a loaded machine, so that step 4 was saved before the disk was full."""
  ref_dir, _ = uninterrupted
  disk = tmp_path / "disk"
  disk.mkdir()
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)],
                           capture_output=True).returncode == 0
  real_save = ckpt_lib.ocp.CheckpointManager.save

  def save(self, step, *a, **k):
    if step == 4 and not mounted:
      raise OSError(28, "No space left on device")
    saved = real_save(self, step, *a, **k)
    if step == 2 and mounted:
      self.wait_until_finished()
      _fill(disk)
    return saved
  monkeypatch.setattr(ckpt_lib.ocp.CheckpointManager, "save", save)
  try:
    workdir = str(disk / "run")
    config = e2e_config(data_dir)
    with pytest.raises(ckpt_lib.CheckpointSaveError) as e:
      loop.train_and_evaluate(config, workdir, registry.get_task(config))
    msg = e.value.strerror
    assert re.search(r"^checkpoint save of step 4 failed: no space left on device in "
                     r".*/disk/run/checkpoints \([\d.]+ MiB free\)\. Saved steps \[2\] are "
                     r"intact; free space and run the same command again to resume\.$", msg), msg
    assert ckpt_lib.Checkpointer(str(disk / "run" / "checkpoints")).all_steps() == [2]
    if mounted:
      (disk / "filler").unlink()
    monkeypatch.undo()
    result = loop.train_and_evaluate(config, workdir, registry.get_task(config))
    assert result["step"] == 6
    ref, got = _losses(ref_dir), _losses(workdir)
    for step in range(1, 7):
      assert got[step] == pytest.approx(ref[step], abs=1e-6), step
  finally:
    if mounted:
      subprocess.run(["umount", "-l", str(disk)], check=False)  # lazy: never left mounted


# `python -c` with this, then main's flags: bert_jax.main whose metrics.jsonl finds the disk
# full at its 4th record (steps 1-3 written, checkpoint 2 saved), as a real full disk
# fails a write (tests/train/test_writer.py fills a real tmpfs).
_FULL_AT_STEP_4 = """
import errno, os
from bert_jax.train import writer
real_open = writer.MetricWriter._open_jsonl
class FullDisk:
  def __init__(self, f):
    self.f, self.records = f, 0
  def write(self, data):
    self.records += 1
    if self.records == 4:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return self.f.write(data)
  def __getattr__(self, name):
    return getattr(self.f, name)
writer.MetricWriter._open_jsonl = lambda self: FullDisk(real_open(self))
from bert_jax import main
main.entry()
"""


def test_a_full_disk_at_the_metrics_append_ends_in_one_line_and_the_rerun_resumes(
    uninterrupted, data_dir, tmp_path, capsys):
  """Not the checkpoint save but the metrics.jsonl append finds the disk full: the CLI
  ends with exit 2 and one error line (no traceback), metrics.jsonl ends at the last whole
  record, checkpoint 2 is intact, and the rerun resumes from it with the same losses."""
  ref_dir, _ = uninterrupted
  workdir = str(tmp_path / "run")
  flags = _flags(e2e_config(data_dir), workdir)
  env = procs.fault_campaign.child_env(
      XLA_FLAGS=procs.xla_flags(8), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", _FULL_AT_STEP_4, *flags], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr and "Exception" not in proc.stderr, proc.stderr
  assert re.fullmatch(
      r"error: writing step 4 to metrics.jsonl failed: No space left on device in "
      rf"{re.escape(workdir)} \([\d.]+ MiB free\)\. The records and checkpoints written "
      r"before are intact; free space and run the same command again to resume\.",
      proc.stderr.strip().splitlines()[-1], re.IGNORECASE), proc.stderr
  assert sorted(_losses(workdir)) == [1, 2, 3]
  assert ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).all_steps() == [2]
  config = e2e_config(data_dir)  # the rerun in this process (the CLI's train_and_evaluate)
  result = loop.train_and_evaluate(config, workdir, registry.get_task(config))
  assert result["step"] == 6 and "resumed from" in capsys.readouterr().out
  ref, got = _losses(ref_dir), _losses(workdir)
  assert sorted(got) == [1, 2, 3, 4, 5, 6]
  for step in range(1, 7):
    assert got[step] == pytest.approx(ref[step], abs=1e-6), step


def test_unknown_config_key_fails_clearly(tmp_path):
  proc = procs.main(["--config=configs/bert_tiny.py", f"--workdir={tmp_path}",
                     "--config.train.nmu_steps=3"], timeout=120)
  out = proc.output
  assert proc.returncode == 2
  assert "unknown config key" in out and "nmu_steps" in out and "num_steps" in out
  assert "Traceback" not in out


def _state_on(mesh_shape, seed=0):
  cfg = tiny_config()
  mesh = parallel.create_mesh(mesh_shape)
  task = PretrainingTask(cfg)
  tx, _ = optim.make_optimizer(cfg.train, 10)
  with mesh:
    state, sh, abstract = loop.create_sharded_state(task, tx, mesh, random_batch(0), seed)
  return state, abstract, mesh


def test_checkpoint_restores_onto_another_mesh_and_falls_back(tmp_path):
  state, _, _ = _state_on((8, 1, 1), seed=1)
  ck = ckpt_lib.Checkpointer(str(tmp_path / "ck"), async_save=False)
  ck.save(1, state, {"task": "t"})
  later = state.replace(step=state.step + 1)
  ck.save(2, later, {"task": "t"})
  ck.wait()
  _, abstract, mesh = _state_on((1, 2, 4), seed=2)
  restored, meta, step = ck.restore(abstract)
  assert step == 2 and meta["task"] == "t"
  kernel = restored.params["bert"]["encoder"]["layers_0"]["mlp"]["wi"]["kernel"]
  assert kernel.sharding.mesh.shape == mesh.shape  # landed on the new mesh's shardings
  jax.tree_util.tree_map(np.testing.assert_array_equal, jax.device_get(restored.params),
                         jax.device_get(state.params))
  # Corrupt the newest step: restore warns and falls back to step 1.
  state_dir = tmp_path / "ck" / "2" / "state"
  for root, _, files in os.walk(state_dir):
    for f in files:
      with open(os.path.join(root, f), "wb") as fh:
        fh.write(b"garbage")
  restored, _, step = ckpt_lib.Checkpointer(str(tmp_path / "ck")).restore(abstract)
  assert step == 1
  # Moved aside, not deleted: step 2 can be saved again.
  assert [p.name.split(".")[0] for p in (tmp_path / "ck").glob("2.corrupt-*")] == ["2"]
  assert ckpt_lib.Checkpointer(str(tmp_path / "ck")).all_steps() == [1]
  # When no step restores (the cause is not one step's files), nothing is renamed.
  for root, _, files in os.walk(tmp_path / "ck" / "1" / "state"):
    for f in files:
      with open(os.path.join(root, f), "wb") as fh:
        fh.write(b"garbage")
  with pytest.raises(ckpt_lib.NoRestorableCheckpointError, match=r"none of the checkpoints \[1\]"):
    ckpt_lib.Checkpointer(str(tmp_path / "ck")).restore(abstract)
  assert (tmp_path / "ck" / "1").is_dir()


def test_checkpoint_of_another_model_shape_is_a_clear_error(tmp_path):
  state, _, _ = _state_on((8, 1, 1))
  ck = ckpt_lib.Checkpointer(str(tmp_path / "ck"), async_save=False)
  ck.save(1, state, {})
  ck.wait()
  cfg = tiny_config()
  cfg.model.hidden_size = 48
  task = PretrainingTask(cfg)
  tx, _ = optim.make_optimizer(cfg.train, 10)
  mesh = parallel.create_mesh((8, 1, 1))
  with mesh:
    _, _, abstract = loop.create_sharded_state(task, tx, mesh, random_batch(0), 0)
  with pytest.raises(ckpt_lib.CheckpointMismatchError, match="shape mismatch.*kernel"):
    ck.restore(abstract)


@pytest.mark.multiprocess
def test_two_processes_train_and_a_lost_peer_ends_the_run(data_dir, tmp_path):
  """Two JAX processes on 127.0.0.1 (2 CPU devices each) train one global batch stream and
  checkpoint it. Process 1 is SIGKILLed mid-run: process 0 must exit non-zero within the
  heartbeat timeout, naming the lost task, not hang. (Reruns of two processes that resume
  and finish exactly: tests/train/test_loop_multihost.py.)"""
  import portpicker
  flags = _flags(e2e_config(data_dir, num_steps=10), str(tmp_path / "run"))
  flags = [f for f in flags if not f.startswith(("--config.mesh_shape",
                                                 "--config.train.checkpoint_every"))]
  flags += ["--config.mesh_shape=(-1,1,1)", "--config.train.eval_every=0",
            "--config.train.checkpoint_every=4", "--num_processes=2", "--heartbeat_timeout=5"]
  env = dict(os.environ, XLA_FLAGS=procs.xla_flags(2),
             JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)

  def start():
    port = portpicker.pick_unused_port()
    return [subprocess.Popen([sys.executable, "-m", "bert_jax.main"] + flags +
                             [f"--coordinator_address=127.0.0.1:{port}", f"--process_id={i}"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for i in range(2)]

  hosts = start()
  seen = []
  for line in hosts[0].stdout:
    seen.append(line)
    if line.startswith("step 6/10"):
      hosts[1].kill()
      killed = time.monotonic()
      break
  out = "".join(seen) + hosts[0].communicate(timeout=120)[0]
  lost_after = time.monotonic() - killed
  hosts[1].communicate()
  assert hosts[0].returncode != 0, out
  assert lost_after < 60, lost_after  # heartbeat 5 s: bounded, not a hang
  assert re.search(r"Task 1 heartbeat timeout|tasks are unhealthy.*\n1|Connection reset by "
                   r"peer", out), out[-3000:]
  saved = ckpt_lib.Checkpointer(str(tmp_path / "run" / "checkpoints")).all_steps()
  assert saved and max(saved) < 10
  assert "4 devices, 2 processes" in out and "step 6/10" in out
  # Each row shard (here each process) saved its data-iterator state.
  data = [f for f in os.listdir(tmp_path / "run" / "checkpoints" / str(max(saved)) / "data")
          if f.endswith(".json")]
  assert sorted(data) == ["shard_0-of-2.json", "shard_1-of-2.json"]


def test_nonfinite_loss_stops_naming_the_step_and_keeps_checkpoints(data_dir, tmp_path):
  config = e2e_config(data_dir, num_steps=6)
  config.train.learning_rate = 1e30  # Adam steps of 1e30: the loss overflows at step 2
  config.train.warmup_steps = 0
  config.train.checkpoint_every = 1
  config.mesh_shape = (8, 1, 1)
  with pytest.raises(loop.NonFiniteLossError, match=r"non-finite loss or gradient at step \d"):
    loop.train_and_evaluate(config, str(tmp_path), registry.get_task(config))
  steps = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints")).all_steps()
  assert steps and 6 not in steps  # what was saved before stays; the run did not finish


@pytest.mark.slow
def test_resume_on_another_device_count_skips_a_partial_save(uninterrupted, data_dir, tmp_path):
  """A run saved on 8 devices, mesh (2, 2, 2), resumes in a fresh process on 2 devices;
  the directory an interrupted async save left behind is ignored and cleaned up."""
  workdir, _ = uninterrupted
  copy = tmp_path / "run"
  shutil.copytree(workdir, copy)
  partial = copy / "checkpoints" / "7.orbax-checkpoint-tmp-1234"
  (partial / "state").mkdir(parents=True)
  (partial / "state" / "garbage").write_bytes(b"half-written")
  flags = [f for f in _flags(e2e_config(data_dir, num_steps=8), str(copy))
           if not f.startswith("--config.mesh_shape")] + ["--config.mesh_shape=(-1,1,1)"]
  proc = procs.main(flags, devices=2, timeout=400)
  assert proc.returncode == 0, proc.output
  assert "at step 6" in proc.output and "2 devices" in proc.output, proc.output
  assert "step 8/8" in proc.output
  assert ckpt_lib.Checkpointer(str(copy / "checkpoints")).all_steps()[-1] == 8
  assert not partial.exists()
  losses = _losses(copy)
  assert sorted(losses)[-2:] == [7, 8] and all(np.isfinite(list(losses.values())))


def test_a_sigterm_during_the_final_save_still_ends_saved(data_dir, tmp_path, monkeypatch):
  """The last save's close ran outside the signal handlers: a SIGTERM then (a scheduler's
  second notice) killed the process before that step was on disk."""
  real_close = ckpt_lib.Checkpointer.close

  def close_under_sigterm(self):
    os.kill(os.getpid(), signal.SIGTERM)  # delivered before the save has finished
    real_close(self)
  monkeypatch.setattr(ckpt_lib.Checkpointer, "close", close_under_sigterm)
  config = e2e_config(data_dir, num_steps=2)
  config.train.async_checkpoints = True
  workdir = str(tmp_path / "run")
  result = loop.train_and_evaluate(config, workdir, registry.get_task(config))
  assert result["step"] == 2 and result["stopped_by"] == "SIGTERM"
  monkeypatch.undo()
  assert ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).all_steps() == [2]


def test_a_ctrl_c_saves_the_step_it_came_in_not_the_next_log_step(data_dir, tmp_path,
                                                                   monkeypatch, capsys):
  """One host: a Ctrl-C while the device is in step 2 (of 6, logging only at step 6)
  saves step 2 or the step queued behind it, 3. The host used to queue every step up to
  the next log step and wait there, where it first saw the flag: without the loop's
  bound on queued steps this test saves step 6 (issue 66: 50 steps late at log_every 50).
  The device here is slow and its progress known: before each step it runs a host
  callback (a 50 ms sleep, then, before step 2, the SIGINT)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import threading  # pylint: disable=g-import-not-at-top
  seen, lock = set(), threading.Lock()

  def before_step(step):  # on the device's thread: step = the steps done so far
    with lock:  # once a step (an SPMD program may call it on every device)
      first = int(step) not in seen
      seen.add(int(step))
    if first:
      time.sleep(0.05)
      if int(step) + 1 == 2:
        os.kill(os.getpid(), signal.SIGINT)
    return np.zeros((), np.int32)

  gate = jax.jit(lambda s: s.replace(step=s.step + jax.pure_callback(
      before_step, jax.ShapeDtypeStruct((), jnp.int32), s.step)))
  real_jit_steps = loop.jit_steps

  def slow_device(*args):
    p_train, p_eval = real_jit_steps(*args)
    return (lambda state, batch: p_train(gate(state), batch)), p_eval
  monkeypatch.setattr(loop, "jit_steps", slow_device)
  # One device, as a CLI run on a CPU has: on the 8 fake devices a step's launch itself
  # waits for the step before (measured), so the host cannot queue ahead there at all.
  monkeypatch.setattr(parallel, "fit_mesh_shape", lambda *args: (1, 1, 1))
  create_mesh = parallel.create_mesh
  monkeypatch.setattr(parallel, "create_mesh",
                      lambda shape: create_mesh(shape, devices=jax.devices()[:1]))
  config = e2e_config(data_dir)
  config.train.update(log_every=6, checkpoint_every=6)
  workdir = str(tmp_path / "run")
  result = loop.train_and_evaluate(config, workdir, registry.get_task(config))
  out = capsys.readouterr().out
  assert result["stopped_by"] == "SIGINT" and result["step"] in (2, 3), (result, out)
  assert "Ctrl-C: saving at the end of the step in progress" in out
  assert f"SIGINT: saved step {result['step']} in" in out
  assert ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).all_steps() == [
      result["step"]]
