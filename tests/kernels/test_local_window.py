"""Sliding-window (local) attention, window_lib.with_window, on every path of kernels.attention.

The semantics come from a band written out here in numpy: query i attends key j when
|i - j| <= W, both in one document and the key real (and j <= i when causal). The rows are
300 long, padded to 384 inside the Pallas kernels (three blocks of 128, the corner blocks
wholly outside the band), and longer than the window on both sides. Padded queries are
left out of the comparisons, as in test_splash.py: the paths average differently there.
"""
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.cudnn import fused_attention_stablehlo as fused
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax import kernels
from bert_jax.kernels import cudnn
from bert_jax.kernels import dropout_hash
from bert_jax.kernels import flash_dropout
from bert_jax.kernels import masks
from bert_jax.kernels import window as window_lib
from bert_jax.kernels import reference
from bert_jax.kernels import splash
from bert_jax.layers.config import TransformerConfig
from bert_jax.runtime import parallel
from bert_jax.runtime import tracing
from tests.kernels.test_flash_dropout import _loss_and_grads  # the same loss, both kernels

B, L, H, D, W = 2, 300, 2, 16, 16
KEY = jax.random.key(3)


def _qkv(seed, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  return [jnp.asarray(rng.normal(size=(B, L, H, D)), dtype) for _ in range(3)]


def _rows():
  """name -> (query segment ids or None, key ids [batch, L], causal): 0 is padding."""
  real = np.ones((B, L), np.int32)
  real[1, 170:] = 0                                    # two lengths: 300, 170
  packed = np.zeros((B, L), np.int32)
  packed[0, :100], packed[0, 100:220], packed[0, 220:290] = 1, 2, 3   # 3 docs + pad
  packed[1, :150], packed[1, 150:] = 1, 2                             # 2 docs
  return {"padding": (None, real, False), "packed": (packed, packed, False),
          "causal_packed": (packed, packed, True)}


def _case(name):
  """(mask with window W, numpy allowed [batch, L, L], real queries [batch, L])."""
  q_ids, kv_ids, causal = _rows()[name]
  mask = masks.row_mask(jnp.asarray(kv_ids)) if q_ids is None else (
      masks.row_mask(None, jnp.asarray(q_ids)))
  mask = window_lib.with_window(masks.add_causal(mask, L) if causal else mask, W)
  i, j = np.arange(L)[:, None], np.arange(L)[None, :]
  same = (np.ones((B, L, L), bool) if q_ids is None
          else q_ids[:, :, None] == kv_ids[:, None, :])
  allowed = (np.abs(i - j) <= W)[None] & same & (kv_ids[:, None, :] > 0)
  if causal:
    allowed &= (j <= i)[None]
  real = (kv_ids if q_ids is None else q_ids) > 0     # the queries that are tokens
  return mask, allowed, real


def _impl(mask, impl, dtype=jnp.float32):
  return lambda q, k, v: kernels.attention(q, k, v, mask=mask, dtype=dtype,
                                           implementation=impl)


def _assert_close(got, want, real, atol=2e-5):
  np.testing.assert_allclose(got[0][real], want[0][real], atol=atol)
  for g, w in zip(got[1], want[1]):
    np.testing.assert_allclose(g, w, atol=atol)
  assert np.abs(want[1][1]).max() > 1e-2             # the gradients are not trivially 0


def test_with_window_makes_a_segment_mask_whose_dense_form_is_the_band():
  assert window_lib.with_window(None, 0) is None
  band = window_lib.with_window(None, 2)
  assert band == masks.SegmentMask(window=2)
  np.testing.assert_array_equal(np.asarray(band.dense(5, 5))[0, 0],
                                np.abs(np.subtract.outer(range(5), range(5))) <= 2)
  assert masks.add_causal(band, 5).window == 2       # causal keeps the window
  with pytest.raises(TypeError, match="SegmentMask or None"):
    window_lib.with_window(masks.padding_mask(jnp.ones((1, 4))), 2)


@pytest.mark.parametrize("name", list(_rows()))
def test_reference_and_xla_equal_the_written_out_band(name):
  mask, allowed, real = _case(name)
  q, k, v = _qkv(1)
  logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D)
  logits = np.where(allowed[:, None], logits, -1e30)  # padded queries: uniform, unread
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  want = np.einsum("bhqk,bkhd->bqhd", probs / probs.sum(-1, keepdims=True), v)
  for impl in ("reference", "xla"):
    got = np.asarray(jax.jit(_impl(mask, impl))(q, k, v))
    np.testing.assert_allclose(got[real], want[real], atol=2e-5, err_msg=impl)


@pytest.mark.parametrize("name", list(_rows()))
def test_splash_equals_the_reference_forward_and_gradients(name):
  mask, _, real = _case(name)
  q, k, v = _qkv(2)
  want = _loss_and_grads(_impl(mask, "reference"), q, k, v, real)
  _assert_close(_loss_and_grads(_impl(mask, "splash"), q, k, v, real), want, real)


def test_flash_dropout_applies_the_band_in_the_kernel():
  """With dropout, against the reference given the kernel's keep mask."""
  mask, _, real = _case("packed")
  q, k, v = _qkv(3)
  rate = 0.1
  keep = dropout_hash.keep_mask(dropout_hash.seed_from_key(KEY), B, H, L, L, rate)
  want = _loss_and_grads(lambda q, k, v: reference.attention(
      q, k, v, None, mask, KEY, rate, False, keep=keep)[0], q, k, v, real)
  got = _loss_and_grads(lambda q, k, v: flash_dropout.flash_dropout_attention(
      q, k, v, mask, KEY, rate, jnp.float32), q, k, v, real)
  _assert_close(got, want, real, atol=1e-5)


def test_auto_on_tpu_takes_the_kernels_with_a_window(monkeypatch):
  mask, _, _ = _case("padding")
  q, k, v = _qkv(4)
  mesh = parallel.create_mesh((2, 1, 1), devices=jax.devices()[:2])
  trace = lambda **kw: str(jax.make_jaxpr(parallel.traced_on(mesh, lambda q, k, v: (
      kernels.attention(q, k, v, mask=mask, implementation="auto", **kw))))(q, k, v))
  monkeypatch.setattr(tracing, "trace_platform", lambda: "tpu")
  assert "splash_mha_fwd" in trace()
  assert "flash_dropout_fwd" in trace(dropout_rng=KEY, dropout_rate=0.1, deterministic=False)


@pytest.fixture
def lowers_for_cuda(monkeypatch):
  """jax asks the installed cuDNN its version before it builds the call; answer 9.10."""
  monkeypatch.setattr(fused, "check_cudnn_version", lambda: 91000)


def _cuda_text(fn, *args):
  return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def test_cudnn_takes_a_causal_window_and_a_two_sided_one_as_a_dense_band(lowers_for_cuda):
  """cuDNN lowered for cuda on this CPU machine (no GPU result is checked here): a causal
  window is its sliding_window_length W + 1 ((i - W - 1, i]); a two-sided one (which
  jax's cuDNN sliding window cannot express) is the fused kernel with the band as its
  mask, for "auto" on a GPU as for "cudnn"."""
  q, k, v = _qkv(5, jnp.bfloat16)
  causal = window_lib.with_window(masks.SegmentMask(causal=True), W)
  on_gpu = lambda mask, impl: parallel.with_trace_platform("gpu", _impl(mask, impl,
                                                                         jnp.bfloat16))
  text = _cuda_text(on_gpu(causal, "cudnn"), q, k, v)
  assert "__cudnn$fmha" in text
  assert re.findall(r"sliding_window_length\\22: (\d+)", text) == [str(W + 1)]
  two_sided = window_lib.with_window(None, W)
  assert cudnn.unsupported(q, v, None, two_sided, False, jnp.bfloat16, (9, 0)) == ""
  for impl in ("auto", "cudnn"):
    text = _cuda_text(on_gpu(two_sided, impl), q, k, v)
    assert "__cudnn$fmha" in text, impl
    assert set(re.findall(r"sliding_window_length\\22: (\d+)", text)) == {"0"}, impl
    assert "tensor<2x1x300x300xbf16>" in text, impl   # the band, as the kernel's bias


def test_cudnn_arguments_mean_the_window():
  """jax's XLA path given cudnn.arguments(mask) == the reference, causal and not."""
  q, k, v = _qkv(6)
  for name in ("padding", "packed", "causal_packed"):
    mask, _, real = _case(name)
    got = jax.nn.dot_product_attention(q, k, v, implementation="xla",
                                       **cudnn.arguments(mask, L, L))
    want = reference.attention(q, k, v, mask=mask)[0]
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(want)[real], atol=2e-5,
                               err_msg=name)


def test_the_start_up_line_names_the_local_window(monkeypatch):
  cfg = TransformerConfig(num_layers=1, num_heads=2, hidden_size=256, dtype="bfloat16",
                          attention_dropout_rate=0.0)
  mesh = parallel.create_mesh((-1, 1, 1))
  assert kernels.describe_path(cfg, 8, 512, mesh, "tpu", window=64) == (
      "splash (fused, local window 64)")
  assert kernels.describe_path(cfg, 8, 512, platform="gpu", window=64) == (
      "cudnn (fused, local window 64)")
  monkeypatch.setattr(tracing, "trace_platform", lambda: "gpu")
  line = kernels.describe_phases(cfg, 8, [128, 512], window=64)
  assert line == ("attention: S128 cudnn (fused); cudnn (fused, local window 64) | "
                  "S512 cudnn (fused); cudnn (fused, local window 64)")
  assert kernels.describe_phases(cfg, 8, [512]) == "attention: S512 cudnn (fused)"


@pytest.fixture
def _xla_flags_restored():
  """chips.topology_devices drops conftest's XLA:CPU-only flags (libtpu aborts on them)."""
  before = os.environ.get("XLA_FLAGS", "")
  yield
  os.environ["XLA_FLAGS"] = before


def test_the_compiled_tpu_program_names_the_local_kernels(_xla_flags_restored):
  """On v5e:2x2 (libtpu, no TPU), forward and backward: the local layer's two splash
  kernels carry their window in the HLO metadata, a global layer's none; flash_dropout's
  kernels (forward, one-pass backward) compile with the band (Mosaic takes its comparisons)."""
  pytest.importorskip("libtpu")
  from bert_jax.hardware import chips  # pylint: disable=g-import-not-at-top
  _, devices = chips.topology_devices("v5e:2x2")
  mesh = parallel.create_mesh((2, 1, 2), devices=devices)
  rows = NamedSharding(mesh, P(("data", "fsdp")))

  def compiled(window, **dropout):
    def grads(q, k, v, ids):
      mask = window_lib.with_window(masks.row_mask(None, ids), window)
      loss = lambda q, k, v: jnp.sum(kernels.attention(
          q, k, v, mask=mask, dtype=jnp.bfloat16, **dropout).astype(jnp.float32))
      return jax.grad(loss, (0, 1, 2))(q, k, v)
    qkv = jax.ShapeDtypeStruct((4, 512, 4, 128), jnp.bfloat16, sharding=rows)
    ids = jax.ShapeDtypeStruct((4, 512), jnp.int32, sharding=rows)
    with jax.default_matmul_precision(None):
      return jax.jit(parallel.traced_on(mesh, grads)).lower(
          qkv, qkv, qkv, ids).compile().as_text()

  assert splash.splash_windows_in_hlo(compiled(64)) == {64: 2}
  assert splash.splash_windows_in_hlo(compiled(0)) == {0: 2}
  text = compiled(64, dropout_rng=KEY, dropout_rate=0.1, deterministic=False)
  # The forward and the one-pass backward (S512 is one block each way).
  assert text.count('custom_call_target="tpu_custom_call"') == 2 and "flash_dropout" in text
