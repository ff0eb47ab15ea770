"""Splash attention (kernels/splash.py) against the XLA path, in Pallas interpret mode on CPU.

The kernel works on blocks of 128 positions, so the rows are 128 (or 256) long: the
smallest shapes it takes. Padded queries (segment 0) are left out of the comparisons: both
paths give them an arbitrary average that nothing reads (see SegmentMask).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.kernels import masks
from bert_jax.runtime import parallel
from bert_jax.runtime import tracing
from bert_jax import kernels
from bert_jax.layers import attention as A
from bert_jax.layers.config import TransformerConfig

B, L, H, D = 2, 128, 2, 16


def _qkv(seed, q_len=L, kv_len=L, batch=B, heads=H):
  rng = np.random.default_rng(seed)
  shapes = [(batch, q_len, heads, D)] + [(batch, kv_len, heads, D)] * 2
  return [jnp.asarray(rng.normal(size=s), jnp.float32) for s in shapes]


def _masks():
  """name -> (SegmentMask, q_len, kv_len, queries that are real [batch, q_len])."""
  real = np.ones((B, L), np.int32)
  real[0, 90:] = 0                                     # row 0: 90 tokens, then padding
  packed = np.zeros((B, L), np.int32)
  packed[0, :50], packed[0, 50:110] = 1, 2             # two documents + padding
  packed[1, :L] = np.repeat([1, 2, 3, 4], 32)          # four full documents
  src = np.zeros((B, 2 * L), np.int32)                 # translation pairs: source side
  src[0, :100], src[0, 100:230] = 1, 2
  src[1, :250] = np.repeat([1, 2, 3, 4], [70, 40, 100, 40])  # target doc k -> source doc k
  return {
      "padding": (masks.row_mask(jnp.asarray(real)), L, L, np.ones((B, L), bool)),
      "packed": (masks.row_mask(jnp.asarray(real), jnp.asarray(packed)), L, L, packed > 0),
      "causal_padding": (masks.add_causal(masks.row_mask(jnp.asarray(real)), L), L, L, real > 0),
      "causal_packed": (masks.add_causal(masks.row_mask(None, jnp.asarray(packed)), L), L, L,
                        packed > 0),
      "cross_pairs": (masks.SegmentMask(jnp.asarray(packed), jnp.asarray(src)), L, 2 * L,
                      packed > 0),
  }


def _loss_and_grads(impl, q, k, v, mask, real, dtype=jnp.float32):
  """(output, d(sum of w * output over real queries) / d(q, k, v))."""
  w = jnp.asarray(np.random.default_rng(9).normal(size=q.shape), jnp.float32)
  keep = jnp.asarray(real)[:, :, None, None]

  def loss(q, k, v):
    out = kernels.attention(q, k, v, mask=mask, dtype=dtype, implementation=impl)
    return jnp.sum(jnp.where(keep, out.astype(jnp.float32) * w, 0.0)), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))(q, k, v)
  return np.asarray(out, np.float32), [np.asarray(g, np.float32) for g in grads]


@pytest.mark.parametrize("case", list(_masks()))
def test_splash_equals_xla_forward_and_gradients(case):
  mask, q_len, kv_len, real = _masks()[case]
  q, k, v = _qkv(1, q_len, kv_len)
  want, want_grads = _loss_and_grads("xla", q, k, v, mask, real)
  got, got_grads = _loss_and_grads("splash", q, k, v, mask, real)
  np.testing.assert_allclose(got[real], want[real], atol=2e-5)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, atol=2e-5)
  assert np.abs(want_grads[1]).max() > 1e-2          # the gradients are not trivially 0


def test_splash_in_bfloat16_matches_xla_in_float32():
  mask, _, _, real = _masks()["causal_packed"]
  q, k, v = _qkv(2)
  want, want_grads = _loss_and_grads("xla", q, k, v, mask, real)
  got, got_grads = _loss_and_grads("splash", q, k, v, mask, real, dtype=jnp.bfloat16)
  np.testing.assert_allclose(got[real], want[real], atol=3e-2)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, atol=5e-2, rtol=5e-2)


def test_lengths_off_the_block_are_padded_and_masked():
  real = np.ones((B, 100), np.int32)
  real[1, 70:] = 0
  mask = masks.add_causal(masks.row_mask(jnp.asarray(real)), 100)
  q, k, v = _qkv(3, 100, 100)
  want, want_grads = _loss_and_grads("xla", q, k, v, mask, real > 0)
  got, got_grads = _loss_and_grads("splash", q, k, v, mask, real > 0)
  np.testing.assert_allclose(got[real > 0], want[real > 0], atol=2e-5)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, atol=2e-5)


def test_splash_under_shard_map_on_a_mesh_equals_xla_without_all_to_all():
  """Rows over (data, fsdp) = 2 x 2, heads over tensor = 2, as the loop traces steps."""
  mesh = parallel.create_mesh((2, 2, 2))
  # Rows already on the data axes, as the loop's batches (an unsharded input would make
  # this a one-device program, where shard_map has nothing to map over).
  q, k, v = jax.device_put(_qkv(4, batch=4, heads=4), parallel.batch_sharding(mesh, 4))
  seg = jnp.asarray(np.repeat([[1, 2]], 4, 0).repeat(64, 1))   # [4, 128], two documents
  mask = masks.add_causal(masks.row_mask(None, seg), L)

  def loss(impl):
    def f(q, k, v):
      out = kernels.attention(q, k, v, mask=mask, implementation=impl)
      return jnp.sum(out * q), out
    return jax.jit(parallel.traced_on(mesh, jax.value_and_grad(f, (0, 1, 2), has_aux=True)))

  (_, want), want_grads = loss("xla")(q, k, v)
  text = loss("splash").lower(q, k, v).compile().as_text()
  assert "all-to-all" not in text
  (_, got), got_grads = loss("splash")(q, k, v)
  np.testing.assert_allclose(got, want, atol=2e-5)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, atol=2e-5)


def test_auto_picks_splash_only_when_tracing_for_tpu(monkeypatch):
  q, k, v = _qkv(5)
  mask = masks.row_mask(jnp.ones((B, L), jnp.int32))
  mesh = parallel.create_mesh((2, 1, 1), devices=jax.devices()[:2])
  trace = lambda: str(jax.make_jaxpr(parallel.traced_on(mesh, lambda q, k, v: (
      kernels.attention(q, k, v, mask=mask, implementation="auto"))))(q, k, v))
  monkeypatch.setattr(tracing, "trace_platform", lambda: "cpu")
  assert "pallas_call" not in trace()
  monkeypatch.setattr(tracing, "trace_platform", lambda: "tpu")
  assert "pallas_call" in trace()
  # What splash cannot do, "auto" leaves to XLA: a relative-position bias here.
  bias = jnp.zeros((1, H, L, L))
  assert "pallas_call" not in str(jax.make_jaxpr(parallel.traced_on(mesh, lambda q, k, v: (
      kernels.attention(q, k, v, bias=bias, mask=mask, implementation="auto"))))(q, k, v))


@pytest.mark.parametrize("kwargs,message", [
    (dict(dropout_rate=0.1, deterministic=False, dropout_rng=jax.random.key(0)),
     "no attention dropout: set model.attention_dropout_rate=0"),
    (dict(bias=jnp.zeros((1, H, L, L))), "no additive bias"),
    (dict(mask=masks.padding_mask(jnp.ones((B, L)))), "segment ids"),
])
def test_splash_refuses_what_it_cannot_compute(kwargs, message):
  q, k, v = _qkv(6)
  with pytest.raises(ValueError, match=message):
    kernels.attention(q, k, v, implementation="splash", **kwargs)


def test_splash_refuses_heads_that_do_not_split_over_tensor():
  mesh = parallel.create_mesh((1, 1, 8))
  q, k, v = _qkv(7)
  f = parallel.traced_on(mesh, lambda q, k, v: kernels.attention(
      q, k, v, implementation="splash"))
  with pytest.raises(ValueError, match=r"num_heads=2 does not split over the tensor axis"):
    jax.eval_shape(f, q, k, v)


def test_multi_head_attention_in_a_causal_model_block():
  """The model path: MultiHeadAttention with the Decoder's causal SegmentMask."""
  cfg = TransformerConfig(hidden_size=32, num_heads=2, vocab_size=10, deterministic=True,
                          attention_dropout_rate=0.0)
  x = jnp.asarray(np.random.default_rng(8).normal(size=(B, L, 32)), jnp.float32)
  real = np.ones((B, L), np.int32)
  real[1, 77:] = 0
  mask = masks.add_causal(masks.row_mask(jnp.asarray(real)), L)
  mha = A.MultiHeadAttention(cfg, causal=True)
  params = nn.meta.unbox(mha.init(jax.random.key(0), x)["params"])
  run = lambda impl: np.asarray(jax.jit(lambda p: A.MultiHeadAttention(
      cfg.replace(attention_impl=impl), causal=True).apply({"params": p}, x, mask=mask))(params))
  np.testing.assert_allclose(run("splash"), run("xla"), atol=2e-5)
