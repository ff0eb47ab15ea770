import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import kernels
from bert_jax.kernels import masks
from bert_jax.kernels import reference
from bert_jax.layers import attention as A
from bert_jax.layers.additive import AdditiveAttention
from bert_jax.layers.config import TransformerConfig


def np_attention(q, k, v, mask=None, bias=None):
  """Textbook softmax(QK^T/sqrt(d) + bias)V per batch and head, in float64."""
  b, lq, h, d = q.shape
  out = np.zeros((b, lq, h, v.shape[-1]))
  weights = np.zeros((b, h, lq, k.shape[1]))
  for bi in range(b):
    for hi in range(h):
      s = q[bi, :, hi] @ k[bi, :, hi].T / np.sqrt(d)
      if bias is not None:
        s = s + np.broadcast_to(bias, (b, h, lq, k.shape[1]))[bi, hi]
      if mask is not None:
        s = np.where(np.broadcast_to(mask, (b, 1, lq, k.shape[1]))[bi, 0], s, -1e30)
      p = np.exp(s - s.max(-1, keepdims=True))
      p /= p.sum(-1, keepdims=True)
      weights[bi, hi] = p
      out[bi, :, hi] = p @ v[bi, :, hi]
  return out, weights


@pytest.fixture(scope="module")
def qkv():
  rng = np.random.default_rng(0)
  return [rng.normal(size=(2, 5, 3, 4)).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("impl", ["reference", "xla"])
def test_dot_product_attention_with_padding_and_causal_masks(qkv, impl):
  q, k, v = qkv
  input_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
  mask = masks.combine_masks(masks.padding_mask(jnp.asarray(input_mask)), masks.causal_mask(5))
  expect, _ = np_attention(q, k, v, np.asarray(mask))
  got = kernels.attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), mask=mask,
                                implementation=impl)
  np.testing.assert_allclose(got, expect, atol=1e-5)


def test_reference_attention_returns_weights_and_bias(qkv):
  q, k, v = qkv
  bias = np.random.default_rng(1).normal(size=(1, 3, 5, 5)).astype(np.float32)
  expect, expect_w = np_attention(q, k, v, bias=bias)
  got, w = reference.attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                 bias=jnp.asarray(bias))
  np.testing.assert_allclose(got, expect, atol=1e-5)
  np.testing.assert_allclose(w, expect_w, atol=1e-6)
  np.testing.assert_allclose(np.asarray(w).sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("impl", ["reference", "xla"])
def test_fully_masked_rows_never_nan(qkv, impl):
  q, k, v = qkv
  mask = jnp.zeros((2, 1, 5, 5), bool).at[0, :, :2].set(True)  # batch 1: nothing allowed
  out = kernels.attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), mask=mask,
                                implementation=impl)
  assert np.isfinite(np.asarray(out)).all()


def test_segment_mask_is_block_diagonal_and_ignores_padding():
  seg = jnp.array([[1, 1, 2, 2, 0]])
  m = np.asarray(masks.segment_mask(seg))[0, 0]
  expect = np.array([[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 0],
                     [0, 0, 0, 0, 0]], bool)
  np.testing.assert_array_equal(m, expect)


def test_additive_attention_matches_concat_formula():
  rng = np.random.default_rng(2)
  q = rng.normal(size=(2, 3, 4)).astype(np.float32)
  k = rng.normal(size=(2, 6, 5)).astype(np.float32)
  vals = rng.normal(size=(2, 6, 7)).astype(np.float32)
  mask = np.ones((2, 3, 6), bool)
  mask[1, :, 4:] = False
  module = AdditiveAttention(units=8)
  params = nn.meta.unbox(module.init(jax.random.key(0), q, k, vals)["params"])
  ctx, w = module.apply({"params": params}, q, k, vals, jnp.asarray(mask))
  w_a, v_a = np.asarray(params["W_a"], np.float64), np.asarray(params["v_a"], np.float64)
  for b in range(2):
    for i in range(3):
      scores = np.array([v_a @ np.tanh(w_a.T @ np.concatenate([k[b, j], q[b, i]]))
                         for j in range(6)])
      scores = np.where(mask[b, i], scores, -np.inf)
      p = np.exp(scores - scores.max())
      p /= p.sum()
      np.testing.assert_allclose(w[b, i], p, atol=1e-5)
      np.testing.assert_allclose(ctx[b, i], p @ vals[b], atol=1e-5)


def test_multi_head_is_concat_of_independent_heads_times_wo():
  cfg = TransformerConfig(hidden_size=12, num_heads=3, vocab_size=10, deterministic=True,
                          attention_dropout_rate=0.0)
  rng = np.random.default_rng(3)
  x = rng.normal(size=(2, 4, 12)).astype(np.float32)
  y = rng.normal(size=(2, 6, 12)).astype(np.float32)  # cross-attention source
  mha = A.MultiHeadAttention(cfg)
  p = nn.meta.unbox(mha.init(jax.random.key(0), x, y)["params"])
  got = mha.apply({"params": p}, x, y)
  heads = []
  for h in range(3):
    proj = lambda name, inp: inp @ np.asarray(p[name]["kernel"][:, h]) + np.asarray(
        p[name]["bias"][h])
    qh, kh, vh = proj("query", x), proj("key", y), proj("value", y)  # [b, len, d_k]
    s = qh @ kh.transpose(0, 2, 1) / np.sqrt(4)
    s = np.exp(s - s.max(-1, keepdims=True))
    heads.append((s / s.sum(-1, keepdims=True)) @ vh)
  concat = np.concatenate(heads, -1)                           # [b, q_len, H * d_v]
  w_o = np.asarray(p["out"]["kernel"]).reshape(12, 12)
  np.testing.assert_allclose(got, concat @ w_o + np.asarray(p["out"]["bias"]), atol=1e-5)


def test_attention_weights_are_sown_for_interpretability():
  cfg = TransformerConfig(hidden_size=8, num_heads=2, vocab_size=10, deterministic=True)
  x = jnp.ones((1, 3, 8))
  mha = A.MultiHeadAttention(cfg)
  v = mha.init(jax.random.key(0), x)
  _, state = mha.apply(v, x, mask=masks.causal_mask(3), return_weights=True,
                       mutable=["intermediates"])
  (w,) = state["intermediates"]["attention_weights"]
  assert w.shape == (1, 2, 3, 3)
  np.testing.assert_allclose(np.triu(np.asarray(w)[0, 0], 1), 0.0)  # causal: no future weight
