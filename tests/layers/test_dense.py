"""layers/dense.py: FlatDense computes DenseGeneral's contraction, matmul_dtype's casts
and float32 accumulation (the tied output layer's too), kernels cast once at load."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.decoding import weights as decode_weights
from bert_jax.layers import dense
from bert_jax.layers import embedding


@pytest.mark.parametrize("x_shape,features,in_shape", [
    ((2, 3, 5), (4, 3), ()),             # q/k/v: [batch, len, embed] -> heads (4) x d (3)
    ((2, 3, 4, 3), 5, (4, 3)),           # W^O: [batch, len, heads, d] -> embed (5)
])
def test_flat_dense_is_dense_general_with_its_parameters_and_flat_arrays(x_shape, features,
                                                                         in_shape):
  """FlatDense draws DenseGeneral's parameters (same names, shapes, logical axes and
  values from the same key) and computes its product, on and into flat arrays."""
  axis = tuple(range(-len(in_shape), 0)) or -1
  init = nn.with_logical_partitioning(nn.initializers.truncated_normal(0.02), ("a", "b", "c"))
  bias_init = nn.with_logical_partitioning(nn.initializers.normal(1.0),
                                           ("b", "c") if in_shape == () else ("c",))
  common = dict(features=features, kernel_init=init, bias_init=bias_init)
  general, flat = nn.DenseGeneral(axis=axis, **common), dense.FlatDense(in_shape=in_shape,
                                                                        **common)
  x = jax.random.normal(jax.random.key(1), x_shape)
  x_flat = x.reshape(x_shape[:2] + (-1,))
  want_params = general.init(jax.random.key(2), x)
  got_params = flat.init(jax.random.key(2), x_flat)
  assert jax.tree.structure(got_params) == jax.tree.structure(want_params)
  for g, w in zip(jax.tree.leaves(got_params, is_leaf=lambda l: isinstance(l, nn.Partitioned)),
                  jax.tree.leaves(want_params, is_leaf=lambda l: isinstance(l, nn.Partitioned))):
    assert g.names == w.names
    np.testing.assert_array_equal(g.value, w.value)
  assert np.abs(nn.unbox(want_params)["params"]["bias"]).max() > 0.1   # a bias that counts
  params = nn.unbox(want_params)
  want = general.apply(params, x)
  got = flat.apply(params, x_flat)
  assert got.shape == want.shape[:2] + (int(np.prod(want.shape[2:])),)
  np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-6, atol=1e-6)
  probe = jax.random.normal(jax.random.key(3), want.shape)
  loss_general = lambda p, x: jnp.sum(general.apply(p, x) * probe)
  loss_flat = lambda p, x: jnp.sum(flat.apply(p, x.reshape(x_flat.shape)) * probe.reshape(
      got.shape))
  for g, w in zip(jax.tree.leaves(jax.grad(loss_flat, (0, 1))(params, x)),
                  jax.tree.leaves(jax.grad(loss_general, (0, 1))(params, x))):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_flat_dense_bias_gradient_sums_in_float32_under_bfloat16():
  """With dtype=bfloat16 the bias is added in float32, so its gradient (a sum over every
  row of a [rows, features] cotangent) is the float32 sum of the bf16 cotangents: what
  flax's Dense returns is that sum rounded to bf16 (8 bits of mantissa; on TPU a bf16 sum)."""
  layer = dense.FlatDense(features=8, dtype=jnp.bfloat16)
  x = jax.random.normal(jax.random.key(1), (4, 512, 16))
  params = layer.init(jax.random.key(2), x)
  probe = jax.random.normal(jax.random.key(3), (4, 512, 8)).astype(jnp.bfloat16)
  loss = lambda p: jnp.sum((layer.apply(p, x) * probe).astype(jnp.float32))
  got = jax.grad(loss)(params)["params"]["bias"]
  want = np.asarray(probe, np.float64).sum((0, 1))
  assert got.dtype == jnp.float32 and layer.apply(params, x).dtype == jnp.bfloat16
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  general = nn.Dense(features=8, dtype=jnp.bfloat16)
  rounded = jax.grad(lambda p: jnp.sum((general.apply(p, x) * probe).astype(jnp.float32)))(
      params)["params"]["bias"]
  assert np.abs(np.asarray(rounded, np.float64) - want).max() > 1e-3   # flax's: bf16-rounded


def test_bf16_matmul_operands_accumulate_in_float32():
  """matmul_dtype="bfloat16": operands rounded to bf16, products summed in float32 (the
  float64 product of the rounded operands, not a bf16-rounded result), float32 out."""
  from bert_jax.layers.config import TransformerConfig  # pylint: disable=g-import-not-at-top
  kx, kw = jax.random.split(jax.random.key(4))
  x = jax.random.normal(kx, (3, 64))
  w = jax.random.normal(kw, (64, 5))
  cfg = TransformerConfig(vocab_size=5, hidden_size=64, num_layers=1, num_heads=1,
                          matmul_dtype="bfloat16")
  got = dense.for_config(cfg)(x, w, (((1,), (0,)), ((), ())))
  r = lambda a: np.asarray(a.astype(jnp.bfloat16).astype(jnp.float32), np.float64)
  want = r(x) @ r(w)
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  assert np.abs(np.asarray(x, np.float64) @ np.asarray(w, np.float64) - want).max() > 1e-3
  table = nn.Embed(5, 64)
  params = table.init(jax.random.key(5), jnp.zeros((1,), jnp.int32))
  logits = table.apply(params, x, method=lambda m, x: embedding.attend(cfg, m, x))  # [3, 5]
  np.testing.assert_allclose(logits, r(x) @ r(params["params"]["embedding"]).T,
                             rtol=1e-5, atol=1e-5)


def test_kernels_cast_once_at_load_compute_the_same_and_leave_no_convert():
  """decoding/weights.cast_kernels (generate / translate at load): a bf16-matmul GPT gives the same
  logits from kernels stored in bf16 as from float32 ones, and its compiled forward pass
  no longer converts a float32 kernel (it did once per call)."""
  import re  # pylint: disable=g-import-not-at-top
  from bert_jax.models.gpt import GPT  # pylint: disable=g-import-not-at-top
  from bert_jax.models.variants import get_model_config  # pylint: disable=g-import-not-at-top
  cfg = get_model_config("gpt/small", num_layers=2, hidden_size=64, num_heads=4, mlp_dim=128,
                         vocab_size=97, max_len=16, scan_layers=False, deterministic=True,
                         matmul_dtype="bfloat16")
  model = GPT(cfg)
  ids = jax.random.randint(jax.random.key(6), (2, 16), 0, 97)
  # As loaded for inference (a jitted init: one compile instead of op-by-op dispatch).
  params = nn.unbox(jax.jit(model.init)(jax.random.key(7), ids)["params"])
  assert decode_weights.cast_kernels(params, cfg.replace(matmul_dtype=None)) is params
  cast = decode_weights.cast_kernels(params, cfg)
  leaves = jax.tree_util.tree_leaves_with_path(cast)
  kernels = [a for p, a in leaves if p[-1].key == "kernel"]
  assert len(kernels) >= 8 and all(a.dtype == jnp.bfloat16 for a in kernels)
  assert all(a.dtype == jnp.float32 for p, a in leaves if p[-1].key != "kernel")  # tables, LN
  apply = jax.jit(lambda p, x: model.apply({"params": p}, x))
  # One compile per kernel dtype, run for the logits and read for its HLO.
  compiled_cast, compiled_f32 = (apply.lower(p, ids).compile() for p in (cast, params))
  np.testing.assert_array_equal(compiled_cast(cast, ids), compiled_f32(params, ids))

  def kernel_converts(compiled):  # f32 -> bf16 converts of a [64, ...] kernel in the HLO
    return [l for l in compiled.as_text().splitlines()
            if re.search(r"bf16\[64,[\d,]+\]\S* convert\(", l)]

  assert kernel_converts(compiled_f32) and not kernel_converts(compiled_cast)
