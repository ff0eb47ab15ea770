"""ModernBERT's assembly: names, layer kinds, the window, GeGLU, packing, the heads.
Its values against transformers' are tests/interop/test_modernbert.py's."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.kernels import masks
from bert_jax.kernels import window as window_lib
from bert_jax.models import modernbert as mb
from bert_jax.models.variants import get_model_config
from tests.models.names import assert_every_param_named

# 4 layers (0 and 3 global), a window of 4 each side, rows of 24: longer than the window.
CFG = get_model_config("modernbert/tiny", vocab_size=97, hidden_size=32, num_heads=2,
                       mlp_dim=48, num_layers=4, local_window=8, deterministic=True)
LEN = 24


def _ids(seed=0, batch=2):
  return jax.random.randint(jax.random.PRNGKey(seed), (batch, LEN), 5, CFG.vocab_size)


@pytest.fixture(scope="module")
def mlm():
  model = mb.ModernBertForMaskedLM(CFG)
  boxed = jax.eval_shape(model.init, jax.random.PRNGKey(0), _ids())
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), _ids()))
  return model, boxed, params


def test_the_tree_mirrors_transformers_names_and_every_param_is_named(mlm):
  _, boxed, params = mlm
  assert_every_param_named(boxed)
  p = params["params"]
  assert set(p) == {"model", "head", "decoder_bias"}
  assert "attn_norm" not in p["model"]["layers_0"]   # an identity, as in transformers
  assert "attn_norm" in p["model"]["layers_1"]
  layer = p["model"]["layers_1"]
  assert layer["attn"]["Wqkv"]["kernel"].shape == (32, 3, 2, 16)
  assert layer["attn"]["Wo"]["kernel"].shape == (2, 16, 32)
  assert layer["mlp"]["Wi"]["kernel"].shape == (32, 2, 48)
  assert layer["mlp"]["Wo"]["kernel"].shape == (48, 32)
  # No biases but the decoder's, no norm biases (transformers' defaults).
  names = ["/".join(str(k.key) for k in path)
           for path, _ in jax.tree_util.tree_leaves_with_path(p)]
  assert [n for n in names if n.endswith("bias")] == ["decoder_bias"]


def test_layer_kinds_follow_global_every():
  base = get_model_config("modernbert/base")
  assert window_lib.local_layers(base) == tuple(i for i in range(22) if i % 3)
  assert len(window_lib.local_layers(base)) == 14
  assert window_lib.local_layers(get_model_config("modernbert/base", local_window=0)) == ()
  # Local layers score local_window + 1 keys, not the whole row.
  d, f, width = 768, 1152, 768
  per_layer = 2 * 4 * d * width + 2 * 3 * d * f
  expected = 22 * per_layer + 4 * width * (8 * 1024 + 14 * 129)
  assert base.flops_per_token(1024) == expected


def test_a_local_layer_sees_only_its_window_and_a_global_one_everything():
  x = jax.random.normal(jax.random.PRNGKey(1), (1, LEN, 32))
  far = x.at[:, 10:].set(0.0)            # changes keys 10.. : more than 4 away from 0..5
  positions = jnp.arange(LEN)[None]
  mask = masks.row_mask(jnp.ones((1, LEN), jnp.int32))
  for local in (True, False):
    attn = mb.ModernBertAttention(CFG, local=local)
    params = attn.init(jax.random.PRNGKey(2), x, mask, positions)
    a, b = (attn.apply(params, v, mask, positions) for v in (x, far))
    near = np.abs(np.asarray(a[0, :6] - b[0, :6])).max()
    if local:
      assert near == 0.0
    else:
      assert near > 1e-3


def test_the_window_is_four_each_side_exactly():
  """local_window 8: query 5 sees key 9 (distance 4) but not key 10 (distance 5)."""
  x = jax.random.normal(jax.random.PRNGKey(1), (1, LEN, 32))
  positions = jnp.arange(LEN)[None]
  mask = masks.row_mask(jnp.ones((1, LEN), jnp.int32))
  attn = mb.ModernBertAttention(CFG, local=True)
  params = attn.init(jax.random.PRNGKey(2), x, mask, positions)
  base = attn.apply(params, x, mask, positions)[0, 5]
  moved = {k: np.abs(np.asarray(attn.apply(params, x.at[:, k].add(1.0), mask, positions)[0, 5]
                                - base)).max() for k in (1, 9, 10)}
  assert moved[1] > 1e-4 and moved[9] > 1e-4 and moved[10] == 0.0, moved


def test_the_mlp_is_geglu():
  x = jax.random.normal(jax.random.PRNGKey(3), (2, 5, 32))
  mlp = mb.ModernBertMLP(CFG)
  params = mlp.init(jax.random.PRNGKey(4), x)["params"]
  wi, wo = nn.meta.unbox(params["Wi"]["kernel"]), nn.meta.unbox(params["Wo"]["kernel"])
  h = np.einsum("bld,dkf->blkf", np.asarray(x), np.asarray(wi))
  gelu = np.asarray(jax.nn.gelu(h[:, :, 0], approximate=False))
  expected = (gelu * h[:, :, 1]) @ np.asarray(wo)
  np.testing.assert_allclose(mlp.apply({"params": params}, x), expected, rtol=1e-5,
                             atol=1e-5)


def test_padding_and_packing_leave_each_document_as_encoded_alone(mlm):
  """Two documents packed in one row (positions restarting) give what each gives alone,
  with the window and the global layers alike; padding changes no real position."""
  _, _, params = mlm
  encoder = mb.ModernBertModel(CFG)
  enc_params = {"params": params["params"]["model"]}
  ids = np.asarray(_ids(5, batch=1))
  a, b = ids[:, :14], ids[:, 14:]
  alone = [encoder.apply(enc_params, d)["sequence_output"] for d in (a, b)]
  seg = np.array([[1] * 14 + [2] * 10])
  pos = np.array([list(range(14)) + list(range(10))])
  packed = encoder.apply(enc_params, ids, positions=pos,
                         packed_segment_ids=seg)["sequence_output"]
  np.testing.assert_allclose(packed[:, :14], alone[0], atol=2e-5)
  np.testing.assert_allclose(packed[:, 14:], alone[1], atol=2e-5)
  padded = np.concatenate([a, np.zeros((1, 10), np.int32)], axis=1)
  mask = (np.arange(LEN) < 14).astype(np.int32)[None]
  out = encoder.apply(enc_params, padded, mask)["sequence_output"]
  np.testing.assert_allclose(out[:, :14], alone[0], atol=2e-5)


def test_masked_position_logits_equal_the_full_logits_gathered(mlm):
  model, _, params = mlm
  ids = _ids(6)
  full = model.apply(params, ids)["mlm_logits"]
  positions = jnp.array([[0, 7, 23], [3, 3, 12]])
  sparse = model.apply(params, ids, masked_lm_positions=positions)["mlm_logits"]
  assert full.shape == (2, LEN, CFG.vocab_size)
  np.testing.assert_allclose(sparse, np.take_along_axis(np.asarray(full),
                                                        np.asarray(positions)[..., None], 1),
                             atol=1e-5)


def test_mean_pooling_ignores_padding_and_cls_takes_the_first_token():
  seq = jnp.arange(2 * 3 * 2, dtype=jnp.float32).reshape(2, 3, 2)
  mask = jnp.array([[1, 1, 0], [1, 1, 1]])
  np.testing.assert_allclose(mb.pool(CFG.replace(pooling="mean"), seq, mask),
                             [[1.0, 2.0], [8.0, 9.0]])
  np.testing.assert_allclose(mb.pool(CFG, seq, mask), seq[:, 0])


def test_classification_heads_give_their_shapes():
  ids = _ids(7)
  for cls, shape in ((mb.ModernBertForSequenceClassification, (2, 3)),
                     (mb.ModernBertForTokenClassification, (2, LEN, 3))):
    model = cls(CFG.replace(pooling="mean"), num_labels=3)
    params = model.init(jax.random.PRNGKey(0), ids)
    assert model.apply(params, ids, jnp.ones_like(ids))["logits"].shape == shape


def test_scanned_layers_and_nsp_are_refused_with_one_line():
  ids = _ids()
  with pytest.raises(ValueError, match="scan_layers=false"):
    mb.ModernBertForMaskedLM(CFG.replace(scan_layers=True)).init(jax.random.PRNGKey(0), ids)
  with pytest.raises(ValueError, match="mlm_packed"):
    mb.ModernBertForMaskedLM(CFG, nsp=True).init(jax.random.PRNGKey(0), ids)
