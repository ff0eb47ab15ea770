"""Flash attention with dropout (kernels/flash_dropout.py) against the reference given the
same keep mask (dropout_hash.keep_mask), in Pallas interpret mode on CPU; and its TPU
lowering (libtpu, no TPU).

Padded queries (no allowed key) are left out of the comparisons, as in test_splash.py:
the paths give them different averages that nothing reads.
"""
import functools
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax import kernels
from bert_jax.kernels import dropout_hash
from bert_jax.kernels import flash_blocks
from bert_jax.kernels import flash_dropout
from bert_jax.kernels import masks
from bert_jax.kernels import reference
from bert_jax.layers.config import TransformerConfig
from bert_jax.runtime import parallel
from bert_jax.runtime import tracing

B, H, D = 2, 2, 128
RATE = 0.1
KEY = jax.random.key(42)


def _qkv(seed, length, batch=B, heads=H, d=D):
  rng = np.random.default_rng(seed)
  return [jnp.asarray(rng.normal(size=(batch, length, heads, d)), jnp.float32)
          for _ in range(3)]


def _cases():
  """name -> (SegmentMask, length, real queries [batch, length])."""
  real = np.ones((B, 256), np.int32)
  real[0, 200:], real[1, 137:] = 0, 0                  # two lengths, then padding
  packed = np.zeros((B, 256), np.int32)
  packed[0, :50], packed[0, 50:170], packed[0, 170:230] = 1, 2, 3   # 3 documents + pad
  packed[1] = np.repeat([1, 2, 3, 4], [64, 100, 60, 32])           # 4, no padding
  short = np.ones((B, 200), np.int32)                  # 200: padded to 256 inside
  short[1, 150:] = 0
  return {
      "padding": (masks.row_mask(jnp.asarray(real)), 256, real > 0),
      "packed": (masks.row_mask(None, jnp.asarray(packed)), 256, packed > 0),
      "off_the_block": (masks.row_mask(jnp.asarray(short)), 200, short > 0),
      "causal_packed": (masks.add_causal(masks.row_mask(None, jnp.asarray(packed)), 256),
                        256, packed > 0),
  }


def _loss_and_grads(attend, q, k, v, real):
  """(output, d(sum of w * output over real queries) / d(q, k, v)), as float32 numpy."""
  w = jnp.asarray(np.random.default_rng(9).normal(size=q.shape), jnp.float32)
  keep = jnp.asarray(real)[:, :, None, None]

  def loss(q, k, v):
    out = attend(q, k, v)
    return jnp.sum(jnp.where(keep, out.astype(jnp.float32) * w, 0.0)), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))(q, k, v)
  return np.asarray(out, np.float32), [np.asarray(g, np.float32) for g in grads]


def _reference(mask, rate=RATE, dtype=jnp.float32):
  """The written-out attention dropping what the kernel drops (KEY's keep_mask)."""
  def attend(q, k, v):
    keep = dropout_hash.keep_mask(dropout_hash.seed_from_key(KEY), q.shape[0], q.shape[2],
                                  q.shape[1], k.shape[1], rate)
    return reference.attention(q, k, v, None, mask, KEY, rate, rate == 0.0, dtype,
                               keep=keep)[0]
  return attend


def _kernel(mask, rate=RATE, dtype=jnp.float32, **blocks):
  return lambda q, k, v: flash_dropout.flash_dropout_attention(q, k, v, mask, KEY, rate,
                                                               dtype, **blocks)


def _assert_close(got, want, real, atol, rtol=0.0):
  np.testing.assert_allclose(got[0][real], want[0][real], atol=atol, rtol=rtol)
  for g, w in zip(got[1], want[1]):
    np.testing.assert_allclose(g, w, atol=atol, rtol=rtol)
  assert np.abs(want[1][1]).max() > 1e-2             # the gradients are not trivially 0


# (heads, d): d 128 and d 96, [batch, heads, len, d] blocks, one head each; BERT's d 64,
# two heads side by side in a block's 128 lanes (flash_blocks.py: layout).
ONE, TWO, HEADS_MAJOR = (H, D), (4, 64), (2, 96)


@pytest.mark.parametrize("case,blocks,heads_d", [
    ("padding", dict(block_q=128, block_kv=128), ONE),
    ("packed", dict(block_q=128, block_kv=256), ONE),
    ("packed", dict(block_q=256, block_kv=128), TWO),  # the same mask from other blocks
    ("off_the_block", {}, ONE),                        # one block each: the one-pass backward
    ("off_the_block", {}, TWO),
    ("causal_packed", dict(block_q=128, block_kv=128), TWO),
    ("causal_packed", {}, ONE),
    ("padding", {}, HEADS_MAJOR),
])
def test_kernel_equals_the_reference_with_the_same_keep_mask(case, blocks, heads_d):
  mask, length, real = _cases()[case]
  q, k, v = _qkv(1, length, heads=heads_d[0], d=heads_d[1])
  want = _loss_and_grads(_reference(mask), q, k, v, real)
  got = _loss_and_grads(_kernel(mask, **blocks), q, k, v, real)
  _assert_close(got, want, real, atol=1e-5)
  # Dropout did act: without it the output is another one.
  plain = _loss_and_grads(_reference(mask, rate=0.0), q, k, v, real)
  assert np.abs(plain[0][real] - want[0][real]).max() > 1e-2


def test_heads_share_a_block_where_they_fill_its_lanes():
  assert flash_blocks.heads_per_block(64, 12) == 2       # BERT-base
  assert flash_blocks.heads_per_block(32, 8) == 4
  assert flash_blocks.heads_per_block(128, 4) == 0       # fills the lanes alone
  assert flash_blocks.heads_per_block(64, 1) == 0        # one head per device: heads-major
  assert flash_blocks.heads_per_block(32, 6) == 0
  assert flash_blocks.heads_per_block(96, 4) == 0


def test_rate_zero_is_attention_without_dropout():
  mask, length, real = _cases()["packed"]
  q, k, v = _qkv(2, length)
  want = _loss_and_grads(_reference(mask, rate=0.0), q, k, v, real)
  _assert_close(_loss_and_grads(_kernel(mask, rate=0.0), q, k, v, real), want, real, 1e-5)


def test_bfloat16_inputs_match_the_float32_reference():
  mask, length, real = _cases()["padding"]
  q, k, v = _qkv(3, length)
  want = _loss_and_grads(_reference(mask), q, k, v, real)
  got = _loss_and_grads(_kernel(mask, dtype=jnp.bfloat16), q, k, v, real)
  _assert_close(got, want, real, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("heads", [2, 4])
def test_on_a_mesh_each_device_drops_its_part_of_the_global_mask(heads):
  """Rows over (data, fsdp) = 2 x 2, heads over tensor = 2: one row and one or two heads
  of 64 per device (heads-major blocks; two heads in one packed block), which must draw
  the bits of its global row and heads, not those of (0, 0)."""
  mesh = parallel.create_mesh((2, 2, 2))
  real = np.ones((4, 128), np.int32)
  real[1, 100:], real[2, 30:] = 0, 0
  mask = masks.row_mask(jnp.asarray(real))
  q, k, v = _qkv(4, 128, batch=4, heads=heads, d=64)
  # Rows already on the data axes, as the loop's batches.
  q, k, v = jax.device_put((q, k, v), NamedSharding(mesh, P(("data", "fsdp"))))
  want = _loss_and_grads(_reference(mask), q, k, v, real > 0)
  got = _loss_and_grads(parallel.traced_on(mesh, _kernel(mask)), q, k, v, real > 0)
  _assert_close(got, want, real > 0, atol=1e-5)


def test_keep_mask_keeps_one_minus_rate_without_pattern():
  for rate in (0.1, 0.5):
    keep = np.asarray(dropout_hash.keep_mask(7, 2, 2, 256, 256, rate))
    sigma = np.sqrt(rate * (1 - rate) / keep.size)
    assert abs(keep.mean() - (1 - rate)) < 4 * sigma, (rate, keep.mean())
    # Neighbouring queries, keys, heads and rows agree as independent bits would.
    agree, n = rate ** 2 + (1 - rate) ** 2, keep[..., 1:, :].size
    for a, b in [(keep[..., 1:, :], keep[..., :-1, :]), (keep[..., 1:], keep[..., :-1]),
                 (keep[:, 1], keep[:, 0]), (keep[1], keep[0])]:
      sigma = np.sqrt(agree * (1 - agree) / min(n, a.size))
      assert abs((a == b).mean() - agree) < 5 * sigma
  other_seed = np.asarray(dropout_hash.keep_mask(8, 2, 2, 256, 256, 0.5))
  assert 0.45 < (other_seed == keep).mean() < 0.55
  # The mask of a part is that part of the whole: bits hang on global positions only.
  np.testing.assert_array_equal(np.asarray(dropout_hash.keep_mask(7, 1, 2, 100, 30, 0.5)),
                                keep[:1, :, :100, :30])
  assert np.asarray(dropout_hash.keep_mask(7, 1, 1, 8, 8, 0.0)).all()


def test_auto_takes_the_kernel_on_tpu_when_dropout_is_active(monkeypatch):
  q, k, v = _qkv(5, 128)
  mask = masks.row_mask(jnp.ones((B, 128), jnp.int32))
  mesh = parallel.create_mesh((2, 1, 1), devices=jax.devices()[:2])

  def trace(**kwargs):
    return str(jax.make_jaxpr(parallel.traced_on(mesh, lambda q, k, v: kernels.attention(
        q, k, v, mask=mask, implementation="auto", **kwargs)))(q, k, v))
  dropout = dict(dropout_rng=KEY, dropout_rate=RATE, deterministic=False)
  monkeypatch.setattr(tracing, "trace_platform", lambda: "tpu")
  assert "flash_dropout_fwd" in trace(**dropout)
  assert "pallas_call" in trace() and "flash_dropout_fwd" not in trace()   # splash's
  monkeypatch.setattr(tracing, "trace_platform", lambda: "cpu")
  assert "pallas_call" not in trace(**dropout)        # the reference on CPU
  with pytest.raises(ValueError, match="flash_dropout.*no additive bias"):
    kernels.attention(q, k, v, jnp.zeros((1, H, 128, 128)), mask, KEY, RATE, False,
                      implementation="flash_dropout")


def test_the_start_up_line_names_the_kernel_with_dropout():
  cfg = TransformerConfig(num_layers=1, num_heads=2, hidden_size=256, dtype="bfloat16",
                          attention_dropout_rate=0.1)
  mesh = parallel.create_mesh((-1, 1, 1))
  assert kernels.describe_path(cfg, 8, 512, mesh, "tpu") == (
      "flash_dropout (fused, attention dropout 0.1 in the kernel: splash has none)")
  assert kernels.describe_path(cfg.replace(attention_dropout_rate=0.0), 8, 512, mesh,
                               "tpu") == "splash (fused)"
  assert kernels.describe_path(cfg.replace(position="relative"), 8, 512, mesh, "tpu") == (
      "reference, not flash_dropout: it takes no additive bias (model.position='relative'"
      "): use model.attention_impl='xla'")


@pytest.fixture
def _xla_flags_restored():
  """chips.topology_devices drops conftest's XLA:CPU-only flags from XLA_FLAGS (libtpu
  aborts on them); put back for the child processes of later tests."""
  before = os.environ.get("XLA_FLAGS", "")
  yield
  os.environ["XLA_FLAGS"] = before


def test_the_kernel_lowers_for_tpu_without_the_scores(_xla_flags_restored):
  """BERT-large's heads (d 64) at S512 on v5e:2x2, forward and backward, and no [rows,
  heads, 512, 512] array of any dtype in the compiled program, nor a [.., heads, 512, 64]
  one (the heads side by side in the lanes), nor the ids broadcast across 128 lanes:
  one block each way gives
  two Mosaic kernels (the forward and the one-pass backward), blocks of 256 three (the
  forward, dq and dk / dv)."""
  pytest.importorskip("libtpu")
  from bert_jax.hardware import chips  # pylint: disable=g-import-not-at-top
  _, devices = chips.topology_devices("v5e:2x2")
  mesh = parallel.create_mesh((2, 1, 2), devices=devices)
  rows = NamedSharding(mesh, P(("data", "fsdp")))

  def grads(q, k, v, ids, rng, blocks):
    mask = masks.row_mask(None, ids)
    loss = lambda q, k, v: jnp.sum(flash_dropout.flash_dropout_attention(
        q, k, v, mask, rng, RATE, jnp.bfloat16, **blocks).astype(jnp.float32))
    return jax.grad(loss, (0, 1, 2))(q, k, v)

  qkv = jax.ShapeDtypeStruct((4, 512, 4, 64), jnp.bfloat16, sharding=rows)
  ids = jax.ShapeDtypeStruct((4, 512), jnp.int32, sharding=rows)
  for blocks, kernels_called in (({}, 2), (dict(block_q=256, block_kv=256), 3)):
    fn = functools.partial(grads, blocks=blocks)
    with jax.default_matmul_precision(None):    # a pod's default, not conftest's "highest"
      text = jax.jit(parallel.traced_on(mesh, fn)).lower(
          qkv, qkv, qkv, ids, jax.eval_shape(lambda: KEY)).compile().as_text()
    assert text.count('custom_call_target="tpu_custom_call"') == kernels_called, blocks
    assert not re.findall(r"\w+\[\d+,\d+,512,512\]", text)
    # Each device's two heads of 64 side by side in 128 lanes: [rows, len, heads * d],
    # never a [rows, heads, len, 64] array (flash_blocks.py: layout).
    assert "bf16[2,512,128]" in text and not re.findall(r"\w+\[2,2,512,64\]", text)
    # The segment ids only as rows [rows, 8, len], never broadcast across the lanes.
    assert "s32[2,8,512]" in text and "s32[2,512,128]" not in text
