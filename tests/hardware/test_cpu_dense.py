"""hardware/cpu_dense.py (installed by hardware.configure on CPU, as tests/conftest.py does) and layers/dense.py: the 2-D gradients equal jax's own gradient of lax.dot_general."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from bert_jax.hardware import cpu_dense
from bert_jax.decoding import weights as decode_weights
from bert_jax.layers import dense
from bert_jax.layers import embedding


@pytest.mark.parametrize("x_shape,w_shape,n", [
    ((6, 5), (5, 7), 1),                 # Dense on a matrix
    ((2, 3, 5), (5, 7), 1),              # Dense on [batch, len, embed]
    ((2, 3, 5), (5, 4, 3), 1),           # DenseGeneral -> [batch, len, heads, d]
    ((2, 3, 4, 3), (4, 3, 5), 2),        # attention output: [heads, d] -> embed
])
def test_value_and_gradients_match_lax(x_shape, w_shape, n):
  kx, kw, kg = jax.random.split(jax.random.key(0), 3)
  x = jax.random.normal(kx, x_shape)
  w = jax.random.normal(kw, w_shape)
  dims = ((tuple(range(len(x_shape) - n, len(x_shape))), tuple(range(n))), ((), ()))
  out_shape = x_shape[:len(x_shape) - n] + w_shape[n:]
  probe = jax.random.normal(kg, out_shape)  # a random cotangent

  def loss(fn):
    return lambda x, w: jnp.sum(fn(x, w, dims) * probe)

  want_y = lax.dot_general(x, w, dims)
  got_y = cpu_dense.dot_general(x, w, dims)
  np.testing.assert_array_equal(got_y, want_y)  # the forward pass is lax's, unchanged
  want = jax.grad(loss(lax.dot_general), argnums=(0, 1))(x, w)
  got = jax.grad(loss(cpu_dense.dot_general), argnums=(0, 1))(x, w)
  for g, e in zip(got, want):
    assert g.shape == e.shape and g.dtype == e.dtype
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("inner", [None, cpu_dense.dot_general], ids=["lax", "grad_2d"])
@pytest.mark.parametrize("x_shape,w_shape,n", [
    ((2, 3, 5), (5, 4, 3), 1),           # q/k/v: [batch, len, embed] -> [batch, len, heads, d]
    ((2, 3, 4, 3), (4, 3, 5), 2),        # W^O: [batch, len, heads, d] -> [batch, len, embed]
])
def test_flat_computes_the_same_contraction_through_its_inner_dot(inner, x_shape, w_shape, n):
  kx, kw, kg = jax.random.split(jax.random.key(1), 3)
  x, w = jax.random.normal(kx, x_shape), jax.random.normal(kw, w_shape)
  dims = ((tuple(range(len(x_shape) - n, len(x_shape))), tuple(range(n))), ((), ()))
  probe = jax.random.normal(kg, x_shape[:len(x_shape) - n] + w_shape[n:])
  seen = []

  def recording(lhs, rhs, dimension_numbers, **kwargs):
    seen.append((lhs.shape, rhs.shape))
    return (inner or lax.dot_general)(lhs, rhs, dimension_numbers, **kwargs)

  flat = dense.flat(recording)
  np.testing.assert_allclose(flat(x, w, dims), lax.dot_general(x, w, dims), rtol=1e-6,
                             atol=1e-6)
  # The inner dot saw one merged contracted dim and one merged output dim.
  assert seen[0] == (x_shape[:len(x_shape) - n] + (np.prod(w_shape[:n]),),
                     (np.prod(w_shape[:n]), np.prod(w_shape[n:])))
  loss = lambda fn: lambda x, w: jnp.sum(fn(x, w, dims) * probe)
  want = jax.grad(loss(lax.dot_general), argnums=(0, 1))(x, w)
  got = jax.grad(loss(flat), argnums=(0, 1))(x, w)
  for g, e in zip(got, want):
    assert g.shape == e.shape
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_other_contractions_fall_back_to_lax():
  x, w = jnp.ones((3, 4, 5)), jnp.ones((3, 5, 6))
  dims = (((2,), (1,)), ((0,), (0,)))  # a batched matmul: not a dense layer
  assert dense._is_dense(x.ndim, dims) == 0  # pylint: disable=protected-access
  np.testing.assert_array_equal(cpu_dense.dot_general(x, w, dims), lax.dot_general(x, w, dims))
  assert dense._is_dense(2, (((0,), (0,)), ((), ()))) == 0  # contracts x's leading dim


def test_flax_layers_with_it_train_like_the_defaults_in_bf16():
  x = jax.random.normal(jax.random.key(1), (2, 8, 16), jnp.bfloat16)
  for layer in (lambda **kw: nn.Dense(32, dtype=jnp.bfloat16, **kw),
                lambda **kw: nn.DenseGeneral((4, 8), dtype=jnp.bfloat16, **kw)):
    ours, ref = layer(dot_general=cpu_dense.dot_general), layer()
    params = ref.init(jax.random.key(2), x)

    def loss(m):
      return lambda p, x: jnp.sum(m.apply(p, x).astype(jnp.float32) ** 2)

    (lo, go), (lr, gr) = (jax.value_and_grad(loss(m), argnums=(0, 1))(params, x)
                          for m in (ours, ref))
    assert lo == lr
    for a, b in zip(jax.tree_util.tree_leaves(go), jax.tree_util.tree_leaves(gr)):
      assert a.dtype == b.dtype
      np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                 rtol=2e-2, atol=2e-2)


def test_tied_output_layer_and_bias_gradients_match_autodiff():
  kx, kt, kb, kg = jax.random.split(jax.random.key(3), 4)
  x = jax.random.normal(kx, (4, 5, 8))
  table = jax.random.normal(kt, (13, 8))
  bias = jax.random.normal(kb, (13,))
  probe = jax.random.normal(kg, (4, 5, 13))

  def ours(x, t, b):
    return jnp.sum(cpu_dense.add_bias(cpu_dense.transposed_dot(x, t), b) * probe)

  def ref(x, t, b):
    return jnp.sum((jnp.dot(x, t.T) + b) * probe)

  assert ours(x, table, bias) == pytest.approx(float(ref(x, table, bias)), rel=1e-6)
  for g, e in zip(jax.grad(ours, argnums=(0, 1, 2))(x, table, bias),
                  jax.grad(ref, argnums=(0, 1, 2))(x, table, bias)):
    assert g.shape == e.shape
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_bf16_tied_output_layer_takes_all_three_products_in_bf16():
  """transposed_dot (BERT's tied MLM projection on CPU) with matmul_dtype follows the Dense
  layers' rule: logits = x·tableᵀ and dx = g·table, dtable = gᵀ·x of the bf16-rounded
  operands and cotangent, summed in float32, float32 logits and float32 gradients."""
  kx, kt, kg = jax.random.split(jax.random.key(9), 3)
  x = jax.random.normal(kx, (2, 3, 64))                       # [batch, len, d]
  table = jax.random.normal(kt, (13, 64))                     # [vocab, d]
  g = jax.random.normal(kg, (2, 3, 13))                       # cotangent of the logits
  y, vjp = jax.jit(lambda x, t: jax.vjp(
      lambda a, b: cpu_dense.transposed_dot(a, b, "bfloat16"), x, t))(x, table)
  dx, dtable = vjp(g)
  assert (y.dtype, dx.dtype, dtable.dtype) == (jnp.float32,) * 3
  r = lambda a: np.asarray(a.astype(jnp.bfloat16).astype(jnp.float32), np.float64)
  x2, t2, g2 = r(x).reshape(6, 64), r(table), r(g).reshape(6, 13)
  np.testing.assert_allclose(y, (x2 @ t2.T).reshape(2, 3, 13), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dx, (g2 @ t2).reshape(x.shape), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dtable, g2.T @ x2, rtol=1e-5, atol=1e-5)
  f32 = np.asarray(cpu_dense.transposed_dot(x, table)).reshape(6, 13)  # without the rounding
  assert np.abs(f32 - x2 @ t2.T).max() > 1e-3


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


def test_bf16_matmul_gradient_takes_its_backward_products_in_bf16_too():
  """With dense_grad_2d (CPU), matmul_dtype="bfloat16" runs all three products of a
  Dense layer as autocast does: the forward as cast_dot_general, and dx = g·wᵀ, dw = xᵀ·g
  of the bf16-rounded cotangent and operands, summed in float32 (jax's own gradient
  multiplied the float32 cotangent by the rounded operands in float32)."""
  from bert_jax.layers.config import TransformerConfig  # pylint: disable=g-import-not-at-top
  kx, kw, kg = jax.random.split(jax.random.key(8), 3)
  x = jax.random.normal(kx, (2, 3, 64))                       # [batch, len, embed]
  w = jax.random.normal(kw, (64, 4, 8))                       # [embed, heads, d]
  g = jax.random.normal(kg, (2, 3, 4, 8))                     # cotangent of the output
  dims = (((2,), (0,)), ((), ()))
  cfg = TransformerConfig(vocab_size=5, hidden_size=64, num_layers=1, num_heads=4,
                          matmul_dtype="bfloat16", dense_grad_2d=True)
  ours = dense.for_config(cfg)
  jaxs = functools.partial(dense.cast_dot_general, jnp.bfloat16)
  y, vjp = jax.jit(lambda x, w: jax.vjp(lambda a, b: ours(a, b, dims), x, w))(x, w)
  np.testing.assert_array_equal(y, jax.jit(lambda x, w: jaxs(x, w, dims))(x, w))
  dx, dw = vjp(g)
  assert (y.dtype, dx.dtype, dw.dtype) == (jnp.float32,) * 3
  r = lambda a: np.asarray(a.astype(jnp.bfloat16).astype(jnp.float32), np.float64)
  x2, w2, g2 = r(x).reshape(6, 64), r(w).reshape(64, 32), r(g).reshape(6, 32)
  np.testing.assert_allclose(dx, (g2 @ w2.T).reshape(x.shape), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dw, (x2.T @ g2).reshape(w.shape), rtol=1e-5, atol=1e-5)
  _, jax_vjp = jax.vjp(lambda a, b: jaxs(a, b, dims), x, w)
  jax_dx = jax_vjp(g)[0]  # the float32 cotangent: another result than the rounded one
  assert np.abs(np.asarray(jax_dx) - (g2 @ w2.T).reshape(x.shape)).max() > 1e-3


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


def test_tied_attend_trains_through_transposed_dot_and_decodes_through_embed_attend():
  """embedding.attend (GPT's and the translation decoder's tied output layer): where
  dense_grad_2d (CPU), training takes transposed_dot's 2-D gradient; decoding keeps
  flax's Embed.attend (faster at a few rows). Same logits and gradients either way."""
  from bert_jax.layers.config import TransformerConfig  # pylint: disable=g-import-not-at-top
  kx, kg = jax.random.split(jax.random.key(6))
  x = jax.random.normal(kx, (2, 3, 16))                       # [batch, len, d]
  g = jax.random.normal(kg, (2, 3, 11))                       # cotangent of the logits
  embed = nn.Embed(11, 16)
  params = embed.init(jax.random.key(7), jnp.zeros((1,), jnp.int32))
  base = dict(vocab_size=11, hidden_size=16, num_layers=1, num_heads=1, dense_grad_2d=True)

  def run(cfg):
    f = lambda p, x: embed.apply(p, x, method=lambda m, x: embedding.attend(cfg, m, x))
    y, vjp = jax.vjp(f, params, x)
    return f, y, vjp(g)

  want_y, want_vjp = jax.vjp(lambda p, x: embed.apply(p, x, method=nn.Embed.attend),
                             params, x)
  for decode, vjp_in_jaxpr in ((False, True), (True, False)):
    f, y, (dp, dx) = run(TransformerConfig(**base, decode=decode))
    assert ("custom_vjp" in str(jax.make_jaxpr(f)(params, x))) is vjp_in_jaxpr
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5)
    want_dp, want_dx = want_vjp(g)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dp["params"]["embedding"], want_dp["params"]["embedding"],
                               rtol=1e-5, atol=1e-5)
