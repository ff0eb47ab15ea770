"""The tfds catalog for fine-tuning data: lazy import, load, text of a record field.

The builders (glue/<task>, conll2003, squad/v1.1, squad/v2.0) import TensorFlow (the
optional `tf` extra), so tensorflow_datasets is only imported inside `load`; nothing
else in bert_jax.tasks needs it. Each family's data.py converts the records (read with
`tfds.as_numpy`) into its own example classes with the same checks as its file readers.
"""
from __future__ import annotations

from typing import Optional


def tfds_kwargs(config) -> dict:
  """load()'s data_dir / download from config.data."""
  return dict(data_dir=config.data.get("tfds_data_dir") or None,
              download=bool(config.data.get("download", True)))


def _tfds():
  """tensorflow_datasets, imported on first use (it pulls TensorFlow for these)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return tfds


def text(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def load(name: str, split: str, data_dir: Optional[str], download: bool):
  tfds = _tfds()
  ds, info = tfds.load(name, split=split, data_dir=data_dir, download=download,
                       with_info=True, shuffle_files=False)
  return tfds.as_numpy(ds), info
