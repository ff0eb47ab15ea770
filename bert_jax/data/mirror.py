"""A prepared data_dir on an object store (gs://), read from a checksummed local copy.

  store = Mirror("gs://bucket/data", cache_dir="~/bert_jax_cache")
  local = store.ensure("nsp-<hash>", "prepared.json", build)  # build(local) if nowhere
  local = store.fetch("nsp-<hash>", "prepared.json")          # copy only, never build

A pod prepares once (process 0, or a Beam job on Dataflow) into gs://; every host copies
what training reads (the instances and the vocabulary: not the documents) to its own
disk at start-up and trains from there. Why a copy, not reading gs:// in place:
array_record's C++ reader in this build does not read gs:// (it hangs; tried against
fake-gcs-server), grain's random access would pay a GCS round trip per record, and a
gcsfuse mount needs FUSE and root on every host (a mounted bucket is a local path here:
it works as any data_dir). The copy is checked: every file's CRC32C (or MD5) against
the one GCS stores for the object, a level's marker file copied last, so a copy cut
short is never taken as complete and is redone by the next start.

Layout: each level `<name>/` (documents-*, vocab-*, nsp-*, mlm_packed-*) is complete
when its marker (corpus_stats.json, vocab.txt, prepared.json) exists, remotely as
locally. The local copy of gs://bucket/data is <cache_dir>/gs/bucket/data/.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import shutil
from typing import Callable, Optional

from bert_jax.runtime import paths


class CorruptDataError(ValueError):
  """A prepared dataset's files do not match what its build recorded."""


@contextlib.contextmanager
def build_lock(root: str):
  """Holds an exclusive lock for building `root` (fcntl on `<root>.lock`, a sibling that
  survives the rmtree of a crashed build). A second process preparing the same directory
  blocks here, then finds the finished build and reuses it, instead of deleting it
  half-way. Local disk only: on a pod the hosts coordinate through data/hosts.py."""
  os.makedirs(os.path.dirname(os.path.abspath(root)), exist_ok=True)
  with open(root + ".lock", "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def _file_digest(path: str, kind: str) -> str:
  """CRC32C or MD5 of a local file, base64 as GCS reports them in object metadata."""
  if kind == "crc32c":
    import google_crc32c  # pylint: disable=g-import-not-at-top  (a gcsfs dependency)
    digest = google_crc32c.Checksum()
  else:
    digest = hashlib.md5()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 22), b""):
      digest.update(chunk)
  return base64.b64encode(digest.digest()).decode()


def mismatch(local: str, info: dict) -> Optional[str]:
  """Why the local file is not the object `info` describes, or None. Size always; then
  CRC32C (every GCS object has one) or else MD5 (when the store gives one)."""
  size = os.path.getsize(local)
  if size != int(info["size"]):
    return f"{size} bytes, the object has {info['size']}"
  kind = "crc32c" if info.get("crc32c") else "md5Hash" if info.get("md5Hash") else None
  if kind:
    mine = _file_digest(local, kind)
    if mine != info[kind]:
      return f"{kind} {mine}, the object's is {info[kind]}"
  return None


def inside(root: str, rel: str) -> bool:
  """Whether `rel` (an object name relative to a level) stays inside `root`."""
  if os.path.isabs(rel) or not rel:
    return False
  target = os.path.normpath(os.path.join(root, rel))
  return target.startswith(os.path.normpath(root) + os.sep)


def local_copy_dir(url: str, cache_dir: str) -> str:
  """<cache_dir>/<scheme>/<bucket>/<path> for an object-store url."""
  scheme, rest = str(url).split("://", 1)
  return os.path.join(os.path.abspath(os.path.expanduser(cache_dir)), scheme,
                      *[p for p in rest.split("/") if p])


class Mirror:
  """The levels of a data_dir on local disk, backed by an object store when data_dir is one.

  `local` is where builds happen and everything is read from: data_dir itself, or the
  local copy of a remote data_dir. With no remote, `ensure` is `build` under a lock.
  """

  def __init__(self, data_dir: str, cache_dir: str = "~/bert_jax_cache"):
    paths.check_filesystem(data_dir, "data.data_dir")
    if paths.is_remote(data_dir):
      import fsspec  # pylint: disable=g-import-not-at-top
      self.remote = str(data_dir).rstrip("/")
      self.fs, self._root = fsspec.core.url_to_fs(self.remote)
      self.local = local_copy_dir(self.remote, cache_dir)
    else:
      self.remote, self.fs = None, None
      self.local = os.path.abspath(os.path.expanduser(data_dir))

  def path(self, name: str) -> str:
    return os.path.join(self.local, name)

  def where(self, name: str) -> str:
    """Where a level lives for a user: its gs:// url, or its local directory."""
    return f"{self.remote}/{name}" if self.remote else self.path(name)

  def ensure(self, name: str, marker: str, build: Callable[[str], object]) -> str:
    """The local directory of level `name`, complete: the bucket's copy if the level is
    complete there (copied unless this host holds the same marker), else `build(local_dir)`
    (which reuses a finished local build and writes `marker` last) and uploaded."""
    local = self.path(name)
    with build_lock(local):
      if self.remote is None:
        build(local)  # every build reuses its own finished output
      elif not self._sync(name, marker):
        build(local)
        self._upload(name, marker)
    return local

  def ensure_in_place(self, name: str, marker: str, build: Callable[[str], object]) -> str:
    """Where level `name` lives (its gs:// url, or local directory), complete: `build(it)`
    unless its marker is there; nothing copied to or from this host. For builders that
    write into the bucket themselves (Beam workers: data/beam/remote.py); the build
    checks and writes `marker` (last) itself, as a local build does."""
    del marker
    with build_lock(self.path(name)):  # one build per host at a time, as `ensure`
      build(self.where(name))  # every build reuses its own finished output
    return self.where(name)

  def fetch(self, name: str, marker: str) -> str:
    """The local directory of level `name`, copied from the remote data_dir if needed;
    never built. FileNotFoundError when no complete copy exists anywhere."""
    local = self.path(name)
    with build_lock(local):
      here = os.path.exists(os.path.join(local, marker))
      if not (self.remote and self._sync(name, marker)) and not here:
        raise FileNotFoundError(
            f"{self.where(name)}/{marker} does not exist: the prepared data are not there "
            "(on a pod without a shared filesystem, data.data_dir must be a gs:// url or a "
            "gcsfuse mount that every host reads).")
    return local

  def _sync(self, name: str, marker: str) -> bool:
    """Makes the local copy of level `name` the bucket's, if the bucket has it complete.

    The bucket is what every host agrees on: a local copy whose marker differs from the
    bucket's (the level was rebuilt there since, e.g. another vocabulary under the same
    name) is replaced, never used beside the others' newer one.
    """
    try:
      remote_marker = self.fs.cat_file(f"{self._remote(name)}/{marker}")
    except FileNotFoundError:
      return False
    mine = os.path.join(self.path(name), marker)
    if os.path.exists(mine):
      with open(mine, "rb") as f:
        if f.read() == remote_marker:
          return True
    self._download(name, marker)
    return True

  # ------------------------------------------------------------ remote side
  def _remote(self, name: str) -> str:
    return f"{self._root}/{name}"

  def _listing(self, name: str) -> dict[str, dict]:
    """relative path -> object info, for every object under level `name`."""
    self.fs.invalidate_cache()
    prefix = self._remote(name) + "/"
    return {p[len(prefix):]: info for p, info in self.fs.find(prefix, detail=True).items()
            if info.get("type", "file") == "file" and not p.endswith("/")}

  def _download(self, name: str, marker: str) -> None:
    """Copies level `name` into its local directory; files checked, marker last."""
    local = self.path(name)
    shutil.rmtree(local, ignore_errors=True)  # an earlier copy cut short
    objects = self._listing(name)
    files = sorted(rel for rel in objects if rel != marker)
    for rel in files:  # an object named a/../../x would be written outside the copy
      if not inside(local, rel):
        raise CorruptDataError(
            f"{self.remote}/{name} holds the object {rel!r}, which leaves the level's "
            "directory: refusing to copy it (rebuild the level, or remove that object).")
    need = sum(int(objects[rel]["size"]) for rel in files)
    os.makedirs(local, exist_ok=True)
    free = shutil.disk_usage(local).free
    if need > free:  # fail before copying, not with a full disk half-way
      raise OSError(f"copying {self.remote}/{name} needs {need / 2**30:.1f} GiB on {local}, "
                    f"which has {free / 2**30:.1f} GiB free: set data.cache_dir to a larger "
                    "disk, or mount the bucket (gcsfuse) and give the mount as data.data_dir.")
    for rel in files:
      os.makedirs(os.path.dirname(os.path.join(local, rel)), exist_ok=True)
    # One batched get: gcsfs fetches the files concurrently.
    self.fs.get([f"{self._remote(name)}/{r}" for r in files],
                [os.path.join(local, r) for r in files])
    for rel in files:
      bad = mismatch(os.path.join(local, rel), objects[rel])
      if bad:
        shutil.rmtree(local, ignore_errors=True)
        raise CorruptDataError(
            f"the copy of {self.remote}/{name}/{rel} has {bad}: the transfer or the object "
            f"is damaged; start again, or rebuild it (rm the gs:// directory {name}).")
    tmp = os.path.join(local, f"{marker}.{os.getpid()}.tmp")  # unique, as every temporary
    self.fs.get_file(f"{self._remote(name)}/{marker}", tmp)
    os.replace(tmp, os.path.join(local, marker))  # last: "this copy is complete"

  def _upload(self, name: str, marker: str) -> None:
    """Uploads the local level `name`; each object checked against its local file, the
    marker uploaded last so that no host copies a level before it is whole."""
    local = self.path(name)
    files = sorted(os.path.relpath(os.path.join(d, f), local)
                   for d, _, names in os.walk(local) for f in names)
    files = [f for f in files if f != marker]
    self.fs.put([os.path.join(local, f) for f in files],
                [f"{self._remote(name)}/{f}" for f in files])
    objects = self._listing(name)
    for rel in files:
      bad = mismatch(os.path.join(local, rel), objects[rel]) if rel in objects else "no object"
      if bad:
        raise CorruptDataError(f"uploading {local}/{rel} to {self.remote}/{name}: the object "
                               f"differs ({bad}); run again to upload it again.")
    self.fs.put_file(os.path.join(local, marker), f"{self._remote(name)}/{marker}")
