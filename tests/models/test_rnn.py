"""The GRU + additive-attention encoder-decoder (Bahdanau et al. 2015)."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.models.rnn import GRUConfig, GRUSeq2Seq

CFG = GRUConfig(vocab_size=23, embed_dim=8, hidden_size=16, attention_units=12,
                deterministic=True)
SRC = jnp.array([[5, 6, 7, 8, 0, 0], [9, 10, 0, 0, 0, 0]])      # [B, S], 0 = padding
TGT_IN = jnp.array([[1, 4, 5, 11], [1, 6, 0, 0]])               # [B, T] shifted right


def _init():
  model = GRUSeq2Seq(CFG)
  return model, model.init({"params": jax.random.key(0)}, SRC, TGT_IN)


def test_step_by_step_decoding_equals_teacher_forcing():
  model, variables = _init()
  full = model.apply(variables, SRC, TGT_IN)                      # [B, T, V]
  cache = model.apply(variables, SRC, method="encode")
  assert set(cache) == {"hidden", "cross_encoded", "cross_mask"}
  assert cache["cross_encoded"].shape == (2, 6, 32)
  for t in range(TGT_IN.shape[1]):
    logits, cache = model.apply(variables, cache, TGT_IN[:, t], method="decode_step")
    np.testing.assert_allclose(logits, full[:, t], atol=1e-5)


def test_padding_changes_nothing():
  """A source padded to 6 or to 9 gives the same annotations and logits: the backward
  GRU starts at each row's last real token and attention never looks at padding."""
  model, variables = _init()
  wider = jnp.pad(SRC, ((0, 0), (0, 3)))
  a = model.apply(variables, SRC, method="encode")
  b = model.apply(variables, wider, method="encode")
  real = np.asarray(SRC > 0)
  np.testing.assert_allclose(np.asarray(a["cross_encoded"])[real],
                             np.asarray(b["cross_encoded"])[:, :6][real], atol=1e-6)
  np.testing.assert_allclose(model.apply(variables, SRC, TGT_IN),
                             model.apply(variables, wider, TGT_IN), atol=1e-5)
  # The backward direction of position 0 has read the whole real source: row 1 (2 real
  # tokens) equals running the model on just those 2 tokens.
  short = model.apply(variables, SRC[1:, :2], method="encode")
  np.testing.assert_allclose(a["cross_encoded"][1, :2], short["cross_encoded"][0], atol=1e-6)


def test_every_param_has_logical_axis_names():
  _, variables = _init()
  leaves = jax.tree_util.tree_leaves(variables["params"],
                                     is_leaf=lambda x: isinstance(x, nn.Partitioned))
  assert leaves and all(isinstance(x, nn.Partitioned) for x in leaves)
  for leaf in leaves:
    assert len(leaf.names) == leaf.value.ndim
