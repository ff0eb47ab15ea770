"""ModernBERT's train step sharded on 8 fake CPU devices equals one device's, and its
params carry the shardings their logical names give (as BERT's: test_sharded_steps)."""
import jax
import ml_collections
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from tests.train.conftest import random_batch, tiny_config
from tests.train.test_sharded_steps import run_steps


def _config():
  c = tiny_config()
  c.model = ml_collections.ConfigDict(dict(
      variant="modernbert/tiny", vocab_size=64, hidden_size=32, num_heads=4, mlp_dim=48,
      num_layers=3, local_window=8, max_len=16))
  c.data.mode = "mlm_packed"
  return c


def test_a_sharded_modernbert_step_equals_one_device():
  batches = [random_batch(i) for i in range(2)]
  ref_state, ref, _, _ = run_steps(_config(), (1, 1, 1), batches, jax.devices()[:1])
  state, got, _, mesh = run_steps(_config(), (2, 2, 2), batches)
  for g, r in zip(got, ref):
    np.testing.assert_allclose(g["loss"], r["loss"], rtol=2e-6)
    np.testing.assert_allclose(g["grad_norm"], r["grad_norm"], rtol=1e-4)
  assert not np.isclose(got[0]["loss"], got[1]["loss"])   # the step changed the params
  layer = state.params["model"]["layers_1"]
  assert layer["attn"]["Wqkv"]["kernel"].sharding == NamedSharding(
      mesh, P("fsdp", None, "tensor", None))
  assert layer["mlp"]["Wi"]["kernel"].sharding == NamedSharding(mesh, P("fsdp", None, "tensor"))
  assert layer["attn"]["Wo"]["kernel"].sharding == NamedSharding(mesh, P("tensor", None, "fsdp"))
  jax.tree_util.tree_map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=2e-5),
      jax.device_get(state.params), jax.device_get(ref_state.params))
