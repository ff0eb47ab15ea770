"""cuDNN attention on this CPU machine: the programs are lowered for `cuda` (jax can, with
its cuDNN version check answered: there is no cuDNN here) and the fused attention's custom
calls read from the StableHLO, and the mask arguments checked against the reference on
jax's XLA path (the same keyword arguments, so the same meaning)."""
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.cudnn import fused_attention_stablehlo as fused

from bert_jax.kernels import masks
from bert_jax.runtime import parallel
from bert_jax import kernels
from bert_jax.kernels import reference
from bert_jax.layers import attention as A
from bert_jax.kernels import cudnn
from bert_jax.layers.config import TransformerConfig

B, T, H, D = 2, 8, 2, 16


@pytest.fixture
def lowers_for_cuda(monkeypatch):
  """jax asks the installed cuDNN its version before it builds the call; answer 9.10."""
  monkeypatch.setattr(fused, "check_cudnn_version", lambda: 91000)


def cudnn_calls(fn, *args):
  """[(target, mask_type, dropout_rate, operand count)] of fn's program lowered for cuda."""
  text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
  calls = []
  for m in re.finditer(r'custom_call @(__cudnn\$fmha\w+)\(([^)]*)\) \{[^"]*"([^"]*)"', text):
    config = json.loads(m.group(3).replace("\\22", "\""))["cudnn_fmha_backend_config"]
    calls.append((m.group(1), config["mask_type"], config["dropout_rate"],
                  len(m.group(2).split(","))))
  return calls


def qkv(dtype=jnp.bfloat16, length=T):
  rng = np.random.default_rng(0)
  return [jnp.asarray(rng.normal(size=(B, length, H, D)), dtype) for _ in range(3)]


CASES = {  # name -> (mask, expected forward call, mask type, operands: q k v [bias] [lens])
    "padding": (masks.SegmentMask(None, jnp.array([[1] * 5 + [0] * 3, [1] * 8])),
                "__cudnn$fmhaSoftmax", "PADDING", 5),
    "causal": (masks.SegmentMask(causal=True), "__cudnn$fmhaSoftmax", "CAUSAL", 3),
    "causal_padding": (masks.SegmentMask(None, jnp.array([[1] * 6 + [0] * 2, [1] * 8]), True),
                       "__cudnn$fmhaSoftmax", "PADDING_CAUSAL", 5),
    # Packed rows: jax 0.10.2's public function has no segment ids -> a mask bias.
    "packed_causal": (masks.SegmentMask(jnp.array([[1, 1, 1, 2, 2, 2, 2, 0]] * 2),
                                    jnp.array([[1, 1, 1, 2, 2, 2, 2, 0]] * 2), True),
                      "__cudnn$fmhaScaleBiasSoftmax", "CAUSAL", 4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_masks_become_cudnn_mask_types_not_a_bias(lowers_for_cuda, name):
  mask, target, mask_type, operands = CASES[name]
  q, k, v = qkv()

  def loss(q, k, v):
    out = parallel.with_trace_platform("gpu", kernels.attention)(
        q, k, v, mask=mask, dtype=jnp.bfloat16)
    return out.astype(jnp.float32).sum()

  calls = cudnn_calls(jax.grad(loss, argnums=(0, 1, 2)), q, k, v)
  assert [c[0] for c in calls] == [target, target.replace("Softmax", "SoftmaxBackward")]
  assert calls[0][1:] == (mask_type, 0.0, operands)
  assert calls[1][1] == mask_type


def test_bert_layer_in_bf16_takes_cudnn_with_padding_lengths(lowers_for_cuda):
  """Through MultiHeadAttention with `auto`, as a BERT step traced for a GPU runs it."""
  cfg = TransformerConfig(vocab_size=16, hidden_size=32, num_layers=1, num_heads=2, max_len=8,
                          dtype="bfloat16", attention_dropout_rate=0.0, deterministic=True)
  layer = A.MultiHeadAttention(cfg)
  x = jnp.ones((B, T, 32), jnp.bfloat16)
  mask = masks.row_mask(jnp.array([[1] * 5 + [0] * 3, [1] * 8]))
  params = jax.eval_shape(lambda x: layer.init(jax.random.key(0), x, mask=mask), x)
  apply = parallel.with_trace_platform("gpu", lambda p, x: layer.apply(p, x, mask=mask))
  assert [c[:2] for c in cudnn_calls(apply, params, x)] == [("__cudnn$fmhaSoftmax", "PADDING")]


def test_cudnn_arguments_mean_the_mask():
  """jax's XLA path given cudnn.arguments(mask) == the reference given the dense mask
  (float32, at the queries that have a key), every case in one program."""
  q, k, v = qkv(jnp.float32)

  @jax.jit
  def pairs(q, k, v):
    return {name: (jax.nn.dot_product_attention(q, k, v, implementation="xla",
                                                **cudnn.arguments(mask, T, T)),
                   reference.attention(q, k, v, mask=mask)[0])
            for name, (mask, *_) in CASES.items()}

  for name, (got, expect) in pairs(q, k, v).items():
    has_key = np.broadcast_to(np.asarray(masks.as_dense(CASES[name][0], T, T)).any(-1)[:, 0],
                              (B, T))                        # [batch, q]
    np.testing.assert_allclose(np.asarray(got)[has_key], np.asarray(expect)[has_key],
                               atol=2e-5, err_msg=name)


def test_gate_follows_jax_rules():
  q64 = jax.ShapeDtypeStruct((B, T, H, 64), jnp.bfloat16)
  q256 = jax.ShapeDtypeStruct((B, T, H, 256), jnp.bfloat16)
  bf16 = jnp.bfloat16
  assert cudnn.unsupported(q64, q64, None, None, False, bf16, (9, 0)) == ""
  assert cudnn.unsupported(q256, q256, None, None, False, bf16, (9, 0)) == ""   # Hopper: 256
  assert "<= 128" in cudnn.unsupported(q256, q256, None, None, False, bf16, (8, 0))
  assert "7.5" in cudnn.unsupported(q64, q64, None, None, False, bf16, (7, 5))  # Turing
  assert "dropout" in cudnn.unsupported(q64, q64, None, None, True, bf16, (9, 0))
  assert "float32" in cudnn.unsupported(q64, q64, None, None, False, jnp.float32, (9, 0))
  odd = jax.ShapeDtypeStruct((B, 7, H, 64), bf16)
  packed = masks.SegmentMask(jnp.ones((B, 7), int), jnp.ones((B, 7), int))
  assert "even" in cudnn.unsupported(odd, odd, None, packed, False, bf16, (9, 0))
  assert cudnn.unsupported(odd, odd, None, masks.SegmentMask(None, jnp.ones((B, 7))), False,
                           bf16, (9, 0)) == ""   # padding lengths: no bias, any length


def test_explicit_cudnn_names_what_is_missing():
  q, k, v = qkv(jnp.float32)
  with pytest.raises(ValueError, match="attention_impl='cudnn'.*float32"):
    kernels.attention(q, k, v, dtype=jnp.float32, implementation="cudnn")


def test_describe_path_names_the_kernel_and_why_not():
  cfg = TransformerConfig(num_layers=1, dtype="bfloat16", attention_dropout_rate=0.1)
  assert describe(cfg, "gpu").startswith("reference, not cudnn: ")
  assert "attention_dropout_rate=0" in describe(cfg, "gpu")
  assert describe(cfg.replace(attention_dropout_rate=0.0), "gpu") == "cudnn (fused)"
  mesh = parallel.create_mesh((-1, 1, 1))  # splash splits rows over it (8 here)
  assert kernels.describe_path(cfg.replace(attention_dropout_rate=0.0), 8, 128, mesh,
                         "tpu") == "splash (fused)"
  assert kernels.describe_path(cfg, 8, 128, mesh, "tpu").startswith(
      "flash_dropout (fused, attention dropout 0.1")   # splash has none; this kernel has
  assert describe(cfg, "cpu") == "xla (no fused kernel on cpu)"
  assert describe(cfg.replace(attention_impl="xla"), "gpu") == "xla (model.attention_impl='xla')"


def describe(cfg, platform):
  return kernels.describe_path(cfg, 8, 128, platform=platform)
