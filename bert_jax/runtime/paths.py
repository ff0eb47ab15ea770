"""Paths that may live on an object store (`gs://bucket/run`) or on local disk.

Every workdir, checkpoint, metrics and data path goes through `etils.epath`; gs:// is
served by gcsfs (fsspec), the client the rest of the stack (orbax's directory
operations, metric files) shares. Orbax's array data go through tensorstore's own GCS
driver. A gs:// path without gcsfs installed is one clear error at startup, never a
silent write to a local directory named `gs:`.
"""
from __future__ import annotations

import contextlib
import errno
import importlib.util
import io
import os
import shutil
import tempfile
from typing import BinaryIO, Iterator, TextIO

from etils import epath



def prefer_gcsfs(environ=None) -> None:
  """gs:// through gcsfs, not tf.io.gfile: epath takes TensorFlow whenever it is
  importable (tensorflow-cpu comes with tfds' catalog builders); gcsfs is one GCS client,
  honours STORAGE_EMULATOR_HOST (tests) and needs no TensorFlow at run time. Entry points
  call it through hardware.configure(); a user's own EPATH_USE_TF is kept."""
  (os.environ if environ is None else environ).setdefault("EPATH_USE_TF", "false")

_FSSPEC = {"gs": "gcsfs", "s3": "s3fs"}


def is_remote(path) -> bool:
  return "://" in str(path)


def resolve(path) -> epath.Path:
  """epath.Path of `path`: absolute on local disk, unchanged on an object store."""
  path = str(path)
  return epath.Path(path if is_remote(path) else os.path.abspath(path))


def check_filesystem(path, what: str = "path") -> None:
  """Raises ValueError (one line) when `path` needs an object-store client that is missing."""
  if not path or not is_remote(path):
    return
  scheme = str(path).split("://", 1)[0]
  package = _FSSPEC.get(scheme)
  if package is None:
    raise ValueError(f"{what} {path}: unsupported scheme {scheme}://; use a local path or "
                     f"one of {sorted(s + '://' for s in _FSSPEC)}.")
  if importlib.util.find_spec(package) is None:
    raise ValueError(f"{what} {path} needs the {package} package for {scheme}:// paths "
                     f"(pip install {package}); nothing was written.")


def check_workdir(path) -> None:
  """check_filesystem, and a ValueError (one line) for a local --workdir that is a file:
  it was a FileExistsError traceback out of the first mkdir."""
  check_filesystem(path, "--workdir")
  if path and not is_remote(path) and os.path.exists(path) and not os.path.isdir(path):
    raise ValueError(f"--workdir {path} is a file, not a directory: give a new or an "
                     "existing run directory.")


def write_atomically(path, data) -> None:
  """Writes `data` (str or bytes) so that a reader sees the old file or the new one, never
  a part (open_atomically)."""
  with open_atomically(path) as f:
    f.write(data.encode("utf-8") if isinstance(data, str) else data)


def _read_umask() -> int:
  """The process umask without setting it (os.umask sets it: a race with other threads
  creating files): /proc's Umask line on Linux, else read once, here at import."""
  try:
    with open("/proc/self/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except (OSError, ValueError):
    pass
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


_IMPORT_UMASK = _read_umask()


def _umask() -> int:
  return _read_umask() if os.path.exists("/proc/self/status") else _IMPORT_UMASK


@contextlib.contextmanager
def open_atomically(path) -> Iterator[BinaryIO]:
  """A binary file that replaces `path` whole when the block ends without an error, for
  output written in pieces (word vectors, exported weights). Locally through a temporary
  file of a unique name in the same directory, renamed over the path: an error or a kill
  mid-way leaves the old file, two writers never share a temporary, and an error leaves
  no temporary behind. On an object store the bytes are spooled to a local temporary
  file and uploaded in one piece only once the block succeeded (an upload replaces the
  object whole; epath's fsspec rename refuses to overwrite), so a writer that raises
  uploads nothing. A rerun that writes a finished run's outputs again never leaves them
  truncated."""
  target = resolve(path)
  if is_remote(path):
    with tempfile.TemporaryFile() as spool:
      yield spool
      spool.seek(0)
      with target.open("wb") as f:
        shutil.copyfileobj(spool, f, 1 << 22)
    return
  target.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      yield f
    # mkstemp makes the file 0600: give it what a plain open() would (umask applied).
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, target)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.unlink(tmp)  # a full disk: the old file stays, no half-written tmp
    raise


@contextlib.contextmanager
def open_text_atomically(path, encoding: str = "utf-8") -> Iterator[TextIO]:
  """open_atomically for text: a str stream, `path` replaced whole only on success."""
  with open_atomically(path) as raw:
    text = io.TextIOWrapper(raw, encoding=encoding, newline="")
    yield text
    text.flush()
    text.detach()  # the raw file is open_atomically's to close


def out_of_space(e: BaseException) -> bool:
  """ENOSPC or EDQUOT anywhere in the exception chain (orbax/tensorstore wrap the OSError)."""
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or (
        "No space left on device" in str(e)):
      return True
    e = e.__cause__ or e.__context__
  return False


def free_space(path) -> str:
  """`12.3 MiB free` on the disk of a local `path`, for a full-disk message."""
  try:
    return f"{shutil.disk_usage(str(path)).free / 2**20:.1f} MiB free"
  except OSError:
    return "free space unknown"


# Path-valued config fields a run may read or write (those unset in a config are skipped).
_CONFIG_PATHS = ("init_from", "data.data_dir", "data.vocab_path", "data.vocab",
                 "predict.input_file", "predict.output_file")


def config_value(config, key: str):
  """config's value at a dotted key, or None where a section or the field is missing."""
  value = config
  for part in key.split("."):
    value = value.get(part) if hasattr(value, "get") else None
  return value


def check_config(config) -> None:
  """check_filesystem on each of a run config's paths that is set: a gs:// path without
  gcsfs is one line at startup, not an error (or a local `gs:` directory) hours later."""
  for key in _CONFIG_PATHS:
    value = config_value(config, key)
    if isinstance(value, str):
      check_filesystem(value, f"config.{key}")
  data = config.get("data") or {}
  if data.get("source") == "file" and config.get("mode", "train") == "train":
    # Named with its key now, not as a bare "[Errno 2] No such file" from the reader.
    for key in ("train_file", "eval_file", "test_file"):
      for path in str(data.get(key) or "").split(","):  # translation: "x.src,x.tgt"
        if path and not is_remote(path) and not os.path.exists(path):
          raise FileNotFoundError(f"config.data.{key}: {path} does not exist.")
  init_from = config.get("init_from")
  if init_from and not is_remote(init_from) and not os.path.exists(init_from):
    # Named now, not as a bare "Checkpoint path ... does not exist" after data preparation.
    raise FileNotFoundError(f"config.init_from {init_from} does not exist (give one of our "
                            "workdirs or a Hugging Face BERT directory).")
