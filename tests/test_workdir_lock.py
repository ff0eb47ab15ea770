"""bert_jax/runtime/workdir_lock.py: one run per workdir; a stale lock taken over with a
warning; the lock gone after the run, and never removed from under its new owner."""
import datetime
import json
import os
import threading
import time
import socket
import subprocess
import sys

import pytest

from bert_jax.runtime import workdir_lock


def _owner(path) -> dict:
  return json.loads(open(path, encoding="utf-8").read())


def test_the_lock_names_this_run_and_goes_at_the_end(tmp_path):
  with workdir_lock.hold(str(tmp_path / "w")) as path:
    owner = _owner(path)
    assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
    assert path == str(tmp_path / "w" / ".bert_jax.lock")
  assert not os.path.exists(path)


def test_a_second_run_is_refused_naming_the_first(tmp_path):
  holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    lock = tmp_path / ".bert_jax.lock"
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lock.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                "started": started, "heartbeat": started}))
    with pytest.raises(ValueError, match=rf"is in use by another run \(pid {holder.pid} on "
                                         rf"{socket.gethostname()}, started {started[:13]}"):
      workdir_lock.acquire(str(tmp_path))
    assert _owner(lock)["pid"] == holder.pid  # untouched
    # The same pid with a heartbeat STALE_S old: a reused pid, not the holder.
    lock.write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                "started": "2026-01-01T00:00:00+00:00"}))
    warnings = []
    workdir_lock.release(workdir_lock.acquire(str(tmp_path), warn=warnings.append))
    assert len(warnings) == 1 and "stale lock" in warnings[0]
  finally:
    holder.kill()
    holder.wait()


def test_a_stale_lock_is_taken_over_with_a_warning(tmp_path):
  gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True)
  dead_pid = int(gone.stdout)
  (tmp_path / ".bert_jax.lock").write_text(json.dumps(
      {"pid": dead_pid, "host": socket.gethostname(), "started": "x"}))
  warnings = []
  path = workdir_lock.acquire(str(tmp_path), warn=warnings.append)
  assert _owner(path)["pid"] == os.getpid()
  assert warnings == [f"warning: taking over the stale lock of --workdir {tmp_path} "
                      f"(pid {dead_pid} on {socket.gethostname()}, started x: that run is "
                      "gone)."]
  workdir_lock.release(path)
  assert not os.path.exists(path)


def test_another_hosts_lock_holds_while_its_heartbeat_is_fresh(tmp_path):
  """A lost node's lock (no heartbeat for STALE_S) is taken over by its requeued job on
  another host; a live one's is not."""
  now = datetime.datetime.now(datetime.timezone.utc)
  lock = tmp_path / ".bert_jax.lock"
  for age_s, taken in ((5, False), (workdir_lock.STALE_S + 60, True)):
    beat = (now - datetime.timedelta(seconds=age_s)).isoformat(timespec="seconds")
    lock.write_text(json.dumps({"pid": 1, "host": "some-other-host", "started": beat,
                                "heartbeat": beat}))
    if not taken:
      with pytest.raises(ValueError, match=r"pid 1 on some-other-host.*heartbeat for 10 min "
                                           r"is taken over; to take it now, delete"):
        workdir_lock.acquire(str(tmp_path))
    else:
      warnings = []
      path = workdir_lock.acquire(str(tmp_path), warn=warnings.append)
      assert _owner(path)["host"] == socket.gethostname() and len(warnings) == 1


def test_the_holder_refreshes_its_heartbeat(tmp_path, monkeypatch):
  path = workdir_lock.acquire(str(tmp_path))
  first = _owner(path)
  first["heartbeat"] = "2026-01-01T00:00:00+00:00"
  open(path, "w", encoding="utf-8").write(json.dumps(first))
  stop = threading.Event()
  beat = threading.Thread(target=workdir_lock._heartbeat, args=(path, stop, 0.05))
  beat.start()
  time.sleep(0.3)
  stop.set()
  beat.join()
  assert _owner(path)["heartbeat"] > "2026-12"  # rewritten with a fresh time
  assert _owner(path)["started"] == first["started"]


def test_a_lock_whose_heartbeat_stopped_is_waited_for_then_taken(tmp_path, monkeypatch):
  """A requeued job on another node, a minute after the old one was lost: it waits until
  the lock is stale instead of failing (exit 2 would not be requeued)."""
  monkeypatch.setattr(workdir_lock, "STALE_S", 3.0)
  monkeypatch.setattr(workdir_lock, "HEARTBEAT_S", 1.0)
  beat = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=2.5))
  (tmp_path / ".bert_jax.lock").write_text(json.dumps(
      {"pid": 1, "host": "lost-node", "started": "x", "heartbeat": beat.isoformat()}))
  warnings = []
  t0 = time.monotonic()
  path = workdir_lock.acquire(str(tmp_path), warn=warnings.append)
  assert time.monotonic() - t0 < 5 and _owner(path)["pid"] == os.getpid()
  assert "waiting until it is 3 s old" in warnings[0] and "stale lock" in warnings[1]


def test_release_leaves_a_lock_that_is_no_longer_ours(tmp_path):
  path = workdir_lock.acquire(str(tmp_path))
  other = {"pid": 1, "host": "elsewhere", "started": "x"}
  open(path, "w", encoding="utf-8").write(json.dumps(other))
  workdir_lock.release(path)
  assert _owner(path) == other


def test_processes_other_than_0_take_no_lock(tmp_path):
  with workdir_lock.hold(str(tmp_path), process_index=1) as path:
    assert path is None and not os.listdir(tmp_path)
