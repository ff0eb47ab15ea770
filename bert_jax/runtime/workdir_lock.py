"""One run per workdir: a lock file taken before the run writes anything, released at its end.

Two runs on one workdir interleave their checkpoints, metric lines and orbax's temporary
directories (the second one's clean-up can delete the first one's save in progress).
`hold(workdir)` creates `<workdir>/.bert_jax.lock` holding the pid, host and start time
of the run; creating it is atomic (O_EXCL on local disk, a create-if-absent upload,
`ifGenerationMatch=0`, on gs://), so of two runs started together exactly one gets it.

The other gets a one-line ValueError naming the run that holds the workdir. A stale lock
is taken over with a warning: on this host, one whose pid no longer runs (a SIGKILL, a
crash); from any host, one whose heartbeat (rewritten by the holder every
HEARTBEAT_S) is older than STALE_S, so a requeued job on another node (SLURM, a
recreated TPU VM) resumes after a lost host without anyone deleting the lock. On a pod
only process 0 takes the lock; the others write what process 0 tells them to.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import sys
import threading
import time
from typing import Callable, Iterator, Optional

from bert_jax.runtime import paths

LOCK_NAME = ".bert_jax.lock"
HEARTBEAT_S = 60.0
STALE_S = 600.0  # ten heartbeats missed: generous for clock skew between hosts


def _now() -> str:
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _age_s(owner: dict) -> float:
  """Seconds since the owner's last heartbeat (its start without one); inf if unknown."""
  try:
    then = datetime.datetime.fromisoformat(owner.get("heartbeat") or owner["started"])
    return (datetime.datetime.now(datetime.timezone.utc) - then).total_seconds()
  except (KeyError, TypeError, ValueError):
    return float("inf")


def _describe(owner: dict) -> str:
  return (f"pid {owner.get('pid')} on {owner.get('host')}, started "
          f"{owner.get('started')}")


def _alive(pid) -> bool:
  """Whether `pid` runs on this host (a process of another user counts as running)."""
  try:
    os.kill(int(pid), 0)
  except ProcessLookupError:
    return False
  except (PermissionError, ValueError, TypeError, OverflowError):
    return isinstance(pid, int)
  return True


def _create(path: str, data: bytes) -> bool:
  """Writes `data` to `path` only if nothing is there; False if something is."""
  if paths.is_remote(path):
    import fsspec  # pylint: disable=g-import-not-at-top
    scheme, rest = path.split("://", 1)
    try:
      fsspec.filesystem(scheme).pipe_file(rest, data, mode="create")
    except FileExistsError:
      return False
    except OSError as e:  # gcsfs: HTTP 412, the precondition ifGenerationMatch=0 failed
      if "412" in str(e) or "precondition" in str(e).lower():
        return False
      raise
    return True
  try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
  except FileExistsError:
    return False
  with os.fdopen(fd, "wb") as f:
    f.write(data)
  return True


def _read(path: str) -> Optional[dict]:
  """The lock's owner, {} for an unreadable lock (a kill mid-write), None if it is gone."""
  try:
    text = paths.resolve(path).read_text()
  except FileNotFoundError:
    return None
  try:
    owner = json.loads(text)
  except ValueError:
    return {}
  return owner if isinstance(owner, dict) else {}


def _stderr(message: str) -> None:
  print(message, file=sys.stderr, flush=True)


def _remove_if_unchanged(path: str, judged: dict) -> None:
  """Removes the lock we judged stale, and only that one: locally it is renamed to a name
  of ours first (atomic; of two runs taking over together one rename wins), then its
  content compared with what was judged; another run's fresh lock is put back."""
  if paths.is_remote(path):  # no rename on an object store: delete, then create-if-absent
    with contextlib.suppress(FileNotFoundError):
      paths.resolve(path).unlink()
    return
  mine = f"{path}.stale-{os.getpid()}"
  try:
    os.rename(path, mine)
  except FileNotFoundError:
    return  # another run took it over first: our create below decides
  if _read(mine) != judged and judged:
    with contextlib.suppress(OSError):
      os.link(mine, path)  # not the one judged: put back unless a newer one is there
  with contextlib.suppress(FileNotFoundError):
    os.unlink(mine)


def acquire(workdir: str, warn: Optional[Callable[[str], None]] = None,
            wait: bool = True) -> str:
  """Takes the workdir's lock; returns its path. ValueError when another run holds it.
  `wait`: a lock from another host whose heartbeat has stopped (two missed beats) is
  waited for until it is stale, as a job requeued after a lost node must."""
  directory = paths.resolve(workdir)
  directory.mkdir(parents=True, exist_ok=True)
  path = str(directory / LOCK_NAME)
  me = {"pid": os.getpid(), "host": socket.gethostname(), "started": _now()}
  me["heartbeat"] = me["started"]
  data = json.dumps(me).encode("utf-8")
  for _ in range(4):  # a stale lock removed, then the create raced by another run: retry
    if _create(path, data):
      return path
    owner = _read(path)
    if owner is None:
      continue  # released between the create and the read
    here = owner.get("host") == me["host"]
    # A heartbeat STALE_S old is stale from anywhere (a reused pid, another container
    # under the same hostname); on this host a pid that runs no more is stale at once.
    stale = bool(owner) and (_age_s(owner) > STALE_S or (here and (
        owner.get("pid") == me["pid"] or not _alive(owner.get("pid")))))
    if owner and not stale and not here and wait and _age_s(owner) > 2 * HEARTBEAT_S:
      (warn or _stderr)(f"warning: --workdir {workdir} is locked by {_describe(owner)}, "
                        f"whose heartbeat stopped {_age_s(owner):.0f} s ago: waiting until "
                        f"it is {STALE_S:.0f} s old to take it over.")
      while owner and _age_s(owner) <= STALE_S:
        time.sleep(min(HEARTBEAT_S, STALE_S - _age_s(owner) + 1))
        owner = _read(path)
      continue  # released, refreshed or stale now: judged again
    if not stale and owner:
      raise ValueError(
          f"--workdir {workdir} is in use by another run ({_describe(owner)}): wait for it "
          f"to end, or use another --workdir (a lock without a heartbeat for "
          f"{STALE_S / 60:.0f} min is taken over; to take it now, delete {path}).")
    if not stale:  # unreadable: a run killed while writing its lock
      if owner == {} and not _unreadable_is_old(path):
        raise ValueError(f"--workdir {workdir}: {path} is being written by a starting run; "
                         "retry in a moment or use another --workdir.")
    (warn or _stderr)(f"warning: taking over the stale lock of --workdir {workdir} "
         f"({_describe(owner) if owner else 'unreadable'}: that run is gone).")
    _remove_if_unchanged(path, owner)
  raise ValueError(f"--workdir {workdir}: could not take {path} (other runs keep "
                   "creating it); use another --workdir.")


def _unreadable_is_old(path: str, seconds: float = 60.0) -> bool:
  """An unreadable lock older than `seconds` was left by a run killed while writing it."""
  if paths.is_remote(path):
    return True  # no mtime through epath: an object store's lock upload is one request
  try:
    return time.time() - os.stat(path).st_mtime > seconds
  except FileNotFoundError:
    return True


def release(path: str) -> None:
  """Removes the lock if it is still this process's (a takeover's is left alone)."""
  owner = _read(path)
  if owner and owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
    with contextlib.suppress(FileNotFoundError):
      paths.resolve(path).unlink()


@contextlib.contextmanager
def hold(workdir: str, *, process_index: int = 0,
         warn: Optional[Callable[[str], None]] = None) -> Iterator[Optional[str]]:
  """The workdir's lock for the block (process 0 only; the others get None)."""
  if process_index != 0 or not workdir:
    yield None
    return
  path = acquire(workdir, warn)
  stop = threading.Event()
  beat = threading.Thread(target=_heartbeat, args=(path, stop), daemon=True,
                          name="workdir-lock-heartbeat")
  beat.start()
  try:
    yield path
  finally:
    stop.set()
    beat.join()  # a heartbeat write in flight ends before the lock is removed
    release(path)


@contextlib.contextmanager
def hold_agreed(workdir: str) -> Iterator[Optional[str]]:
  """hold() on a pod: process 0 takes the lock and every process learns the outcome
  (multihost.allgather), so a refusal stops all of them with the same line instead of
  leaving the others waiting for process 0 in their first collective."""
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import multihost  # pylint: disable=g-import-not-at-top
  index = jax.process_index()
  with contextlib.ExitStack() as stack:
    refusal = ""
    if index == 0:
      try:
        stack.enter_context(hold(workdir))
      except ValueError as e:
        refusal = str(e)
    refusal = multihost.allgather("workdir-lock", refusal)[0]
    if refusal:
      raise ValueError(refusal)
    yield str(paths.resolve(workdir) / LOCK_NAME) if index == 0 else None


def _heartbeat(path: str, stop: threading.Event, every_s: Optional[float] = None) -> None:
  """Rewrites the lock with a fresh heartbeat while it is ours; a storage hiccup is
  skipped (the next beat tries again), a lock taken over by another run is left alone."""
  while not stop.wait(HEARTBEAT_S if every_s is None else every_s):
    try:
      owner = _read(path)
      if not owner or owner.get("pid") != os.getpid() or (
          owner.get("host") != socket.gethostname()):
        _stderr(f"error: the lock {path} is no longer this run's "
                f"({_describe(owner) if owner else 'removed'}): another run may be writing "
                "this workdir; stop one of them.")
        return
      if stop.is_set():  # released meanwhile: never re-create a removed lock
        return
      paths.write_atomically(path, json.dumps(dict(owner, heartbeat=_now())))
    except OSError:
      continue
