"""Checkpointer.restore agreed by every process, with a second process played by a stand-in
for multihost.allgather: its step list and its restore outcomes are what another host would
report (two real processes: tests/train/test_loop_multihost.py); and keep_checkpoints below
one refused before a checkpoint is touched."""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax.checkpoint import manager as ckpt_lib
from bert_jax.runtime import multihost
from scripts.bad_input_campaign import digests


def _state(value: float):
  mesh = jax.make_mesh((8,), ("d",))
  sharding = NamedSharding(mesh, P("d"))
  return {"w": jax.device_put(jnp.full((16,), value, jnp.float32), sharding)}


def _saved(tmp_path, steps=(2, 4)):
  ck = ckpt_lib.Checkpointer(str(tmp_path / "ck"), async_save=False)
  for s in steps:
    ck.save(s, _state(float(s)), {"task": "t"})
  ck.wait()
  return ck


def _abstract():
  return jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), _state(0.0))


class _Peer:
  """Process 1 of two: lists `steps` and answers each restore with the next of `verdicts`
  ("" = it restored); this test's process is process 0."""

  def __init__(self, steps=None, verdicts=()):
    self.steps, self.verdicts, self.calls = steps, list(verdicts), []

  def __call__(self, name, value, timeout_s=multihost.TIMEOUT_S):
    self.calls.append((name, value))
    if name == "checkpoint-steps":
      return [value, value if self.steps is None else self.steps]
    if name == "checkpoint-restore":
      return [value, self.verdicts.pop(0) if self.verdicts else ""]
    return [value, "process 1's value"]


def test_a_step_another_process_cannot_read_is_skipped_by_all(tmp_path, monkeypatch, caplog):
  """This process reads step 4 fine, but process 1 cannot (a damaged shard of its own):
  both restore step 2, and step 4 is moved aside once (by process 0, this one)."""
  ck = _saved(tmp_path)
  peer = _Peer(verdicts=["OSError: damaged shard on host 1", ""])
  monkeypatch.setattr(multihost, "allgather", peer)
  with caplog.at_level("WARNING"):
    state, meta, step = ck.restore(_abstract())
  assert step == 2 and meta["task"] == "t"
  np.testing.assert_array_equal(jax.device_get(state["w"]), np.full((16,), 2.0))
  assert [n for n, _ in peer.calls] == ["checkpoint-steps", "checkpoint-restore",
                                        "checkpoint-restore", "checkpoint-moved-aside"]
  assert [v for n, v in peer.calls if n == "checkpoint-restore"] == ["", ""]  # both read here
  assert "could not be restored on process 1 (OSError: damaged shard on host 1)" in caplog.text
  assert [p.name.split(".")[0] for p in (tmp_path / "ck").glob("4.corrupt-*")] == ["4"]
  assert ckpt_lib.Checkpointer(str(tmp_path / "ck")).all_steps() == [2]


def test_the_step_list_is_process_0s(tmp_path, monkeypatch, caplog):
  """Process 1 lists only step 2 (a lagging filesystem): every process restores from
  process 0's list, newest first (step 4 restores on both here)."""
  ck = _saved(tmp_path)
  monkeypatch.setattr(multihost, "allgather", _Peer(steps=[2]))
  with caplog.at_level("WARNING"):
    assert ck.latest_step(agreed=True) == 4
    assert ck.restore(_abstract())[2] == 4
  assert "process 0: [2, 4]; process 1: [2]" in caplog.text


def test_a_shape_mismatch_on_another_process_stops_every_process(tmp_path, monkeypatch):
  ck = _saved(tmp_path, steps=(2,))
  verdict = "stop: CheckpointMismatchError: checkpoint x does not fit this model:"
  monkeypatch.setattr(multihost, "allgather", _Peer(verdicts=[verdict]))
  with pytest.raises(ckpt_lib.CheckpointMismatchError, match="on process 1: checkpoint x"):
    ck.restore(_abstract())
  assert (tmp_path / "ck" / "2").is_dir()  # nothing renamed


def test_when_every_step_fails_somewhere_all_stop_with_one_error(tmp_path, monkeypatch):
  ck = _saved(tmp_path)
  monkeypatch.setattr(multihost, "allgather", _Peer(verdicts=["OSError: a", "OSError: b"]))
  with pytest.raises(ckpt_lib.NoRestorableCheckpointError,
                     match=r"none of the checkpoints \[4, 2\] .* nothing was moved"):
    ck.restore(_abstract())
  assert ckpt_lib.Checkpointer(str(tmp_path / "ck")).all_steps() == [2, 4]  # nothing renamed


@pytest.mark.parametrize("keep", [0, -1, True, 2.5, "3"])
def test_keeping_fewer_than_one_checkpoint_is_refused_before_the_manager(tmp_path, keep):
  """orbax's LatestN(0) would delete every step: Checkpointer refuses, naming the field."""
  saved = _saved(tmp_path)
  before = digests(tmp_path / "ck")
  with pytest.raises(ValueError, match=r"train\.keep_checkpoints=.*expected an integer >= 1"):
    ckpt_lib.Checkpointer(str(tmp_path / "ck"), keep=keep, async_save=False)
  assert digests(tmp_path / "ck") == before and saved.all_steps() == [2, 4]


def test_the_cli_refuses_keep_checkpoints_0_in_one_line_and_loses_nothing(tmp_path):
  """Through the real training CLI, before data preparation or any write."""
  _saved(tmp_path / "run").wait()
  os.rename(tmp_path / "run" / "ck", tmp_path / "run" / "checkpoints")
  before = digests(tmp_path / "run")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  proc = subprocess.run(
      [sys.executable, "-m", "bert_jax.main", "--config", "configs/bert_tiny.py",
       "--workdir", str(tmp_path / "run"), "--config.train.keep_checkpoints=0",
       f"--config.data.data_dir={tmp_path / 'data'}"],
      cwd=root, capture_output=True, text=True, timeout=300, check=False)
  assert proc.returncode == 2, proc.stderr
  errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
  assert errors == ["error: train.keep_checkpoints=0; expected an integer >= 1 (the "
                    "checkpoints to keep: fewer would delete every checkpoint of the run)."]
  assert "Traceback" not in proc.stderr
  assert digests(tmp_path / "run") == before and not (tmp_path / "data").exists()



def test_a_storage_error_is_retried_then_reported_never_rolled_back(tmp_path, monkeypatch):
  """A permission error or an unavailable store is not a damaged step: read again; if it
  stays, one CheckpointReadError, every step where it was, nothing moved aside."""
  from bert_jax.checkpoint import restore_errors
  ck = _saved(tmp_path)
  before = digests(tmp_path / "ck")
  real_read, calls = ck._read, []
  monkeypatch.setattr(restore_errors.time, "sleep", lambda s: calls.append(("sleep", s)))

  def flaky(step, args):
    calls.append(step)
    if len(calls) < 3:
      raise PermissionError(13, "Permission denied", f"ck/{step}/state")
    return real_read(step, args)
  monkeypatch.setattr(ck, "_read", flaky)
  assert ck.restore(_abstract())[2] == 4  # the newest, after a retry
  assert calls == [4, ("sleep", 1.0), 4]

  def unavailable(step, args):
    raise ValueError("UNAVAILABLE: GCS backend 503 Service Unavailable")
  monkeypatch.setattr(ck, "_read", unavailable)
  with pytest.raises(ckpt_lib.CheckpointReadError,
                     match=r"ck/4 could not be read after 3 tries \(UNAVAILABLE.*nothing was "
                           r"rolled back or moved"):
    ck.restore(_abstract())
  assert digests(tmp_path / "ck") == before and ck.all_steps() == [2, 4]


def test_a_step_written_in_a_newer_format_is_one_error_naming_both_versions(tmp_path):
  from bert_jax.checkpoint import restore_errors
  ck = _saved(tmp_path, steps=(2,))
  meta_file = tmp_path / "ck" / "2" / "meta" / "metadata"
  meta = json.loads(meta_file.read_text())
  assert meta["format"] == restore_errors.FORMAT and meta["code_version"]
  meta_file.write_text(json.dumps(dict(meta, format=restore_errors.FORMAT + 1,
                                       code_version="9.0.0")))
  with pytest.raises(ckpt_lib.CheckpointFormatError,
                     match=rf"format {restore_errors.FORMAT + 1} by bert_jax 9\.0\.0; this is "
                           rf"bert_jax .*, which reads format {restore_errors.FORMAT} and older"):
    ck.restore(_abstract())
  assert (tmp_path / "ck" / "2").is_dir()
  restore_errors.check_format({"task": "t"}, "old")  # written before the field: format 0


def test_moved_aside_steps_beyond_keep_checkpoints_are_removed(tmp_path, monkeypatch):
  ck = ckpt_lib.Checkpointer(str(tmp_path / "ck"), keep=2, async_save=False)
  for stamp in ("20261201-000000", "20261202-000000", "20261203-000000"):
    (tmp_path / "ck" / f"7.corrupt-{stamp}").mkdir(parents=True)
  for s in (2, 4):
    ck.save(s, _state(float(s)), {"task": "t"})
  ck.wait()
  monkeypatch.setattr(multihost, "allgather", _Peer(verdicts=["OSError: damaged", ""]))
  assert ck.restore(_abstract())[2] == 2
  left = sorted(p.name for p in (tmp_path / "ck").iterdir() if ".corrupt-" in p.name)
  assert len(left) == 2 and left[1] == "7.corrupt-20261203-000000"  # the two newest
  assert left[0].startswith("4.corrupt-2026")


@pytest.mark.parametrize("error,transient", [
    (PermissionError(13, "Permission denied"), True),
    (TimeoutError("read timed out"), True),
    (OSError(5, "Input/output error"), True),
    (ValueError("DEADLINE_EXCEEDED: tensorstore read"), True),
    (FileNotFoundError(2, "No such file"), False),
    (ValueError("Error reading array: not a valid zarr chunk"), False),
    (json.JSONDecodeError("Expecting value", "", 0), False),
])
def test_storage_errors_are_told_from_damaged_files(error, transient):
  from bert_jax.checkpoint import restore_errors
  assert restore_errors.transient(error) is transient
  wrapped = RuntimeError("restore failed")
  wrapped.__cause__ = error
  assert restore_errors.transient(wrapped) is transient
