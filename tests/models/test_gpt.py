"""models/gpt.py: logical axis names (the cached decoding tests are in tests/test_decoding.py)."""
import jax
import jax.numpy as jnp
import pytest

from bert_jax.models.gpt import GPT
from bert_jax.models.variants import get_model_config
from tests.models.names import assert_every_param_named


@pytest.mark.parametrize("scan", [False, True])
def test_every_param_has_logical_axis_names(scan):
  cfg = get_model_config("gpt/small", scan_layers=scan, num_layers=2)
  ids = jnp.zeros((1, 8), jnp.int32)
  assert_every_param_named(jax.eval_shape(lambda: GPT(cfg).init(jax.random.key(0), ids))["params"])


# Cached (decode-mode) steps against the full forward pass: tests/test_decoding.py.
