import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.kernels import masks
from bert_jax.layers import attention as A
from bert_jax.runtime import tracing
from bert_jax.layers.blocks import EncoderBlock
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.param_layout import scan_to_unrolled, unrolled_to_scan
from bert_jax.layers.stacks import Encoder

TINY = TransformerConfig(vocab_size=40, hidden_size=16, num_layers=3, num_heads=4, mlp_dim=24,
                         max_len=16, deterministic=True, layer_norm_eps=1e-6)


def np_layer_norm(x, p, eps):
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + eps) * np.asarray(p["scale"]) + np.asarray(p["bias"])


@pytest.mark.parametrize("pre_ln", [False, True])
def test_encoder_block_post_and_pre_ln_formulas(pre_ln):
  cfg = TINY.replace(pre_ln=pre_ln, activation="relu")
  x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype(np.float32)
  block = EncoderBlock(cfg)
  p = nn.meta.unbox(block.init(jax.random.key(0), x)["params"])
  got = np.asarray(block.apply({"params": p}, x))

  def mha(h):
    from bert_jax.layers.attention import MultiHeadAttention
    return np.asarray(MultiHeadAttention(cfg).apply({"params": p["attention"]}, h))

  def ffn(h):
    m = p["mlp"]
    inner = np.maximum(h @ np.asarray(m["wi"]["kernel"]) + np.asarray(m["wi"]["bias"]), 0)
    return inner @ np.asarray(m["wo"]["kernel"]) + np.asarray(m["wo"]["bias"])

  eps = cfg.layer_norm_eps
  if pre_ln:
    h = x + mha(np_layer_norm(x, p["attention_norm"], eps))
    expect = h + ffn(np_layer_norm(h, p["mlp_norm"], eps))
  else:
    h = np_layer_norm(x + mha(x), p["attention_norm"], eps)
    expect = np_layer_norm(h + ffn(h), p["mlp_norm"], eps)
  np.testing.assert_allclose(got, expect, atol=2e-5)


@pytest.mark.parametrize("remat", ["none", "dots"])
def test_scan_equals_unrolled(remat):
  x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype(np.float32)
  mask = masks.padding_mask(jnp.array([[1] * 6, [1] * 4 + [0] * 2]))
  unrolled = Encoder(TINY.replace(remat_policy=remat))
  scanned = Encoder(TINY.replace(scan_layers=True, remat_policy=remat))
  # Jitted init: one compile instead of op-by-op dispatch.
  p = nn.meta.unbox(jax.jit(unrolled.init)(jax.random.key(0), x, mask)["params"])
  p_scan = unrolled_to_scan(p)
  assert p_scan["layers"]["attention"]["query"]["kernel"].shape == (3, 16, 4, 4)

  def grads_and_outputs(mod, params):
    """One compile per model for the forward outputs and the gradients of sum(y^2)."""
    def loss(q):
      y, h = mod.apply({"params": q}, x, mask, output_hidden_states=True)
      return jnp.sum(y ** 2), (y, h)
    return jax.jit(jax.grad(loss, has_aux=True))(params)

  g1, (y1, h1) = grads_and_outputs(unrolled, p)
  g2, (y2, h2) = grads_and_outputs(scanned, p_scan)
  np.testing.assert_allclose(y1, y2, atol=1e-5)
  np.testing.assert_allclose(h1, h2, atol=1e-5)
  assert h1.shape == (4, 2, 6, 16)
  # Gradients agree too (remat must not change the math).
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-4),
                         unrolled_to_scan(g1), g2)
  # And the conversion round-trips exactly.
  jax.tree_util.tree_map(np.testing.assert_array_equal, scan_to_unrolled(p_scan), p)


# What each named remat policy keeps of a layer's forward pass (stacks._REMAT_POLICIES),
# as jax's own residual listing reports it: tensors named by attention.py, or their copies
# offloaded to host memory ("f32<host>"). Where splash attention may run (TPU), q, k and v
# are kept flat, [batch, len, heads * d] (here [2, 6, 4 * 4]), not [batch, len, heads, d]:
# the latter's stack took splash's layout, d = 64 padded to 128 lanes, twice the bytes
# (attention.splash_layout). These tests take that decision as a TPU trace would.
SAVED_BY_POLICY = {
    "qkv_proj": ["f32[2,6,16] named 'query_proj'", "f32[2,6,16] named 'key_proj'",
                 "f32[2,6,16] named 'value_proj'"],
    "kv_proj": ["f32[2,6,16] named 'key_proj'", "f32[2,6,16] named 'value_proj'"],
    "dots_except_mlp": ["f32[2,6,16] named 'query_proj'", "f32[2,6,16] named 'key_proj'",
                        "f32[2,6,16] named 'value_proj'", "f32[2,6,16] named 'out_proj'"],
    "qkv_proj_offloaded": ["f32<host>[2,6,16]"] * 3,
    "full": [],
}


@pytest.fixture
def splash_traced(monkeypatch):
  """The layout decision of a TPU trace with splash attention (attention.splash_layout),
  here on CPU: flat where d is not a multiple of 128 lanes."""
  monkeypatch.setattr(A, "splash_layout", lambda cfg, *operands: cfg.d_head % 128 != 0)


def test_q_k_v_are_flat_only_where_splash_runs(monkeypatch):
  """splash_layout asks the question dot_product_attention asks (runs_splash, or
  runs_flash_dropout with attention dropout) of the shapes the projections will have:
  every reason the TPU kernels fall back flattens nothing."""
  cfg = TINY.replace(attention_dropout_rate=0.1, deterministic=False)  # d = 4, 4 heads
  x = jnp.zeros((4, 6, 16))
  segments = masks.SegmentMask(kv_ids=jnp.ones((4, 6), jnp.int32))
  flat = lambda c, *, kv=None, bias=None, mask=segments, rows=x: A.splash_layout(
      c, rows, kv, bias, mask)
  det = cfg.replace(deterministic=True)
  assert not flat(det)  # CPU: "auto" is XLA's attention
  monkeypatch.setattr(tracing, "trace_platform", lambda: "tpu")
  # A TPU trace on 8 devices without a mesh would make the partitioner split the kernel.
  assert not flat(det)
  with jax.sharding.use_abstract_mesh(
      jax.sharding.AbstractMesh((2, 1, 2), ("data", "fsdp", "tensor"))):
    assert flat(det) and flat(cfg.replace(attention_dropout_rate=0.0))
    assert flat(det, mask=None)
    assert flat(det, kv=jnp.zeros((4, 9, 16)))  # cross-attention, other kv length
    assert flat(cfg)  # attention dropout: kernels/flash_dropout.py runs, the same tiles
    assert not flat(cfg.replace(attention_dropout_rate=0.0, decode=True))
    assert not flat(det.replace(attention_impl="xla"))
    assert not flat(det.replace(attention_impl="reference"))
    assert not flat(det.replace(num_heads=2, head_dim=128))  # d fills the lanes
    assert not flat(det, bias=jnp.zeros((1, 4, 6, 6)))  # relative positions' bias
    assert not flat(det, mask=masks.padding_mask(jnp.ones((4, 6))))  # bools, not segment ids
    assert not flat(det, rows=jnp.zeros((3, 6, 16)))  # 3 rows over 2 data devices
  with jax.sharding.use_abstract_mesh(
      jax.sharding.AbstractMesh((1, 1, 8), ("data", "fsdp", "tensor"))):
    assert not flat(det)  # 4 heads over 8 tensor devices
  monkeypatch.setattr(tracing, "trace_platform", lambda: "cpu")
  assert flat(det.replace(attention_impl="splash"))  # Pallas interpret mode
  with pytest.raises(ValueError, match="no additive bias"):
    flat(det.replace(attention_impl="splash"), bias=jnp.zeros((1, 4, 6, 6)))


def test_cpu_keeps_the_projections_dots_as_they_were(capsys):
  x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype(np.float32)
  saved = _saved_activations("dots_no_batch", x, capsys)
  assert sum("f32[2,6,4,4] output of dot_general" in l for l in saved) == 3, saved


def _saved_activations(policy, x, capsys, **overrides):
  """jax.ad_checkpoint.print_saved_residuals' lines for [batch, len, ...] activations."""
  enc = Encoder(TINY.replace(num_layers=1, remat_policy=policy,
                             **overrides))
  p = enc.init(jax.random.key(0), x)
  capsys.readouterr()
  jax.ad_checkpoint.print_saved_residuals(lambda q: enc.apply(q, x)[0].sum(), p)
  lines = capsys.readouterr().out.splitlines()
  return [l for l in lines if "[2,6," in l and "from a constant" not in l]


@pytest.mark.parametrize("policy", sorted(SAVED_BY_POLICY))
def test_named_remat_policies_save_the_named_projections(policy, capsys, splash_traced):
  x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype(np.float32)
  saved = _saved_activations(policy, x, capsys)
  assert len(saved) == len(SAVED_BY_POLICY[policy]), saved
  for want in SAVED_BY_POLICY[policy]:
    assert any(want in line for line in saved), (want, saved)


def test_heads_that_fill_the_lanes_are_saved_unflattened(capsys, splash_traced):
  """d = 128 fills TPU's lanes: q/k/v are kept [batch, len, heads, d], no relayout."""
  x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype(np.float32)
  saved = _saved_activations("qkv_proj", x, capsys, num_heads=2, head_dim=128)
  assert len(saved) == 3, saved
  for name in ("query_proj", "key_proj", "value_proj"):
    assert any(f"f32[2,6,2,128] named '{name}'" in line for line in saved), (name, saved)


def test_dots_no_batch_saves_the_projections_dots_flat(capsys, splash_traced):
  """jax's dots_no_batch saves the raw matmul outputs: the q/k/v projections' dots give
  [batch, len, heads * d] (here [2, 6, 4 * 4]), not [batch, len, heads, d], whose stack
  took d minor and padded it to 128 lanes on TPU (dense.FlatDense); W^O's gives [2, 6, 16]."""
  x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype(np.float32)
  saved = [l for l in _saved_activations("dots_no_batch", x, capsys) if "dot_general" in l]
  shapes = sorted(l.split(" ")[0] for l in saved)
  # q, k, v and the output projection, then the FFN's two matmuls.
  assert shapes == ["f32[2,6,16]"] * 5 + ["f32[2,6,24]"], saved
  assert sum("layers/dense.py" in l for l in saved) == 6, saved   # all six: FlatDense's


def test_heads_that_fill_the_lanes_keep_their_projection_dots(capsys, splash_traced):
  x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype(np.float32)
  saved = _saved_activations("dots_no_batch", x, capsys, num_heads=2, head_dim=128)
  assert sum("f32[2,6,2,128] output of dot_general" in l for l in saved) == 3, saved


def test_named_remat_policies_keep_the_gradients(monkeypatch):
  """Each policy, with q/k/v flat as a TPU trace keeps them, gives the gradients of the
  plain encoder (no remat, nothing flat)."""
  x = np.random.default_rng(2).normal(size=(2, 6, 16)).astype(np.float32)
  mask = masks.padding_mask(jnp.array([[1] * 6, [1] * 4 + [0] * 2]))

  def encoder(policy):
    return Encoder(TINY.replace(scan_layers=True, remat_policy=policy))

  # The remat policy and q/k/v's layout change no parameter: every policy's gradients are
  # taken at the same params (one jitted init instead of one op-by-op init per policy).
  p = nn.meta.unbox(jax.jit(encoder("none").init)(jax.random.key(0), x, mask)["params"])

  def grads(policy):
    enc = encoder(policy)
    loss = lambda q: jnp.sum(enc.apply({"params": q}, x, mask)[0] ** 2)
    return jax.jit(jax.value_and_grad(loss))(p)

  want = grads("none")
  monkeypatch.setattr(A, "splash_layout", lambda cfg, *operands: True)
  for policy in ("none", "dots_no_batch", "qkv_proj", "kv_proj", "qkv_proj_offloaded"):
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5),
                           want, grads(policy))
