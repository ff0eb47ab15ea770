"""Shared pieces of the HF BERT interop tests: the fixtures' paths and two helpers.

tests/testdata/hf/ comes from scripts/make_hf_fixtures.py (transformers 4.57.6 and 5.23.0):
a random tiny BertForPreTraining, its outputs on a padded batch, and re-saved variants.
"""
import os
import shutil

import numpy as np
from safetensors.numpy import save_file

from bert_jax.interop import hf_layout

HF_DATA = os.path.join(os.path.dirname(__file__), "..", "testdata", "hf")
TINY = os.path.join(HF_DATA, "tiny_bert")              # BertForPreTraining, transformers 4.57
TINY_MODEL = os.path.join(HF_DATA, "tiny_bert_model")  # its BertModel, no prefix / heads
TINY_V5 = os.path.join(HF_DATA, "tiny_bert_v5")        # re-saved by transformers 5.23


def checkpoint(tmp_path, tensors, config_from=TINY):
  """A checkpoint dir holding `tensors` and the tiny config."""
  out = tmp_path / "ckpt"
  out.mkdir(parents=True)
  shutil.copy(os.path.join(config_from, "config.json"), out / "config.json")
  save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
  return str(out)


def assert_same(a, b):
  a, b = hf_layout.plain_flat(a), hf_layout.plain_flat(b)
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
