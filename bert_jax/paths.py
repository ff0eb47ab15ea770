"""Paths that may live on an object store (`gs://bucket/run`) or on local disk.

Every workdir, checkpoint, metrics and data path goes through `etils.epath`; gs:// is
served by gcsfs (fsspec), the client the rest of the stack (orbax's directory
operations, metric files) shares. Orbax's array data go through tensorstore's own GCS
driver. A gs:// path without gcsfs installed is one clear error at startup, never a
silent write to a local directory named `gs:`.
"""
from __future__ import annotations

import importlib.util
import os

from etils import epath

# epath serves gs:// through tf.io.gfile whenever TensorFlow is importable (we install
# tensorflow-cpu for tfds' catalog builders); use gcsfs instead: one GCS client, which
# honors STORAGE_EMULATOR_HOST (tests) and needs no TensorFlow at run time.
os.environ.setdefault("EPATH_USE_TF", "false")

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
