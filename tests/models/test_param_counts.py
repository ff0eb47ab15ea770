"""Our BertForPreTraining has exactly transformers' parameter count for every BERT size.

The reference counts (tests/testdata/hf/param_counts.json) are transformers'
`BertForPreTraining(config).num_parameters()` (tied decoder counted once), written by
scripts/make_hf_fixtures.py together with the sizes they were built from.
"""
import json
import math
import os

import flax.linen as nn
import jax
import pytest

from bert_jax.models.bert import BertForPreTraining, dummy_inputs
from bert_jax.models.variants import VARIANTS, get_model_config

with open(os.path.join(os.path.dirname(__file__), "..", "testdata", "hf",
                       "param_counts.json")) as _f:
  REFERENCE = {k: v for k, v in json.load(_f).items() if not k.startswith("_")}
BERT_VARIANTS = sorted(name for name in VARIANTS if name.startswith("bert/"))


def _count(name: str) -> int:
  cfg = get_model_config(name, scan_layers=True)  # same count, one layer to trace
  abstract = jax.eval_shape(  # shapes only: bert/large allocates nothing
      lambda: BertForPreTraining(cfg).init(jax.random.key(0), **dummy_inputs()))
  return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(
      nn.meta.unbox(abstract["params"])))


def test_reference_covers_every_variant_at_its_current_size():
  assert sorted(REFERENCE) == BERT_VARIANTS
  for name in BERT_VARIANTS:
    sizes = {k: v for k, v in REFERENCE[name].items() if k != "num_parameters"}
    assert sizes == {k: VARIANTS[name][k] for k in sizes}, (
        f"{name} changed size: rerun scripts/make_hf_fixtures.py --only counts")


@pytest.mark.parametrize("name", BERT_VARIANTS)
def test_param_count_equals_transformers(name):
  assert _count(name) == REFERENCE[name]["num_parameters"]


def test_known_counts():
  assert REFERENCE["bert/base"]["num_parameters"] == 110_106_428
  assert REFERENCE["bert/large"]["num_parameters"] == 336_226_108
