"""Fine-tuning heads: layouts against their definitions, logical names, padding."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models import heads
from bert_jax.models.bert import BertModel
from bert_jax.models.variants import get_model_config

CFG = get_model_config("bert/tiny", vocab_size=64, max_len=16, deterministic=True)
IDS = jnp.asarray(np.random.default_rng(0).integers(5, 64, size=(2, 10)), jnp.int32)
MASK = jnp.asarray([[1] * 10, [1] * 6 + [0] * 4], jnp.int32)
SEG = jnp.zeros_like(IDS)

HEADS = {"classification": lambda c: heads.BertForSequenceClassification(c, 3),
         "tokens": lambda c: heads.BertForTokenClassification(c, 5),
         "qa": heads.BertForQuestionAnswering}


def _init(name, cfg=CFG):
  model = HEADS[name](cfg)
  return model, model.init(jax.random.key(1), IDS, MASK, SEG)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_every_head_param_has_logical_axis_names(name):
  _, variables = _init(name)
  leaves = jax.tree_util.tree_leaves_with_path(
      variables["params"], is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
  for path, leaf in leaves:
    assert isinstance(leaf, nn.LogicallyPartitioned), jax.tree_util.keystr(path)
    assert len(leaf.names) == leaf.value.ndim


def test_heads_are_one_dense_layer_on_the_encoder():
  for name in sorted(HEADS):
    model, variables = _init(name)
    params = nn.unbox(variables["params"])
    out = model.apply({"params": params}, IDS, MASK, SEG)
    enc = BertModel(CFG, add_pooler=name == "classification").apply(
        {"params": params["bert"]}, IDS, MASK, SEG)
    if name == "classification":
      k, b = params["classifier"]["kernel"], params["classifier"]["bias"]
      np.testing.assert_allclose(out["logits"], enc["pooled_output"] @ k + b, atol=1e-5)
      assert out["logits"].shape == (2, 3)
    elif name == "tokens":
      k, b = params["classifier"]["kernel"], params["classifier"]["bias"]
      np.testing.assert_allclose(out["logits"], enc["sequence_output"] @ k + b, atol=1e-5)
      assert out["logits"].shape == (2, 10, 5)
    else:
      k, b = params["qa_outputs"]["kernel"], params["qa_outputs"]["bias"]
      want = enc["sequence_output"] @ k + b                         # [2, 10, 2]
      real = np.asarray(MASK, bool)
      np.testing.assert_allclose(out["start_logits"][real], want[..., 0][real], atol=1e-5)
      np.testing.assert_allclose(out["end_logits"][real], want[..., 1][real], atol=1e-5)
      # Padding can never be a span boundary.
      assert (out["start_logits"][~real] < -1e8).all() and (out["end_logits"][~real] < -1e8).all()


def test_no_pooler_params_without_a_pooled_head():
  for name in ("tokens", "qa"):
    _, variables = _init(name)
    assert "pooler" not in variables["params"]["bert"]


def test_mean_pooling_averages_only_real_tokens():
  model = heads.BertForSequenceClassification(CFG, 2, pooling="mean")
  params = nn.unbox(model.init(jax.random.key(2), IDS, MASK, SEG)["params"])
  assert "pooler" not in params["bert"]
  out = model.apply({"params": params}, IDS, MASK, SEG)["logits"]
  seq = BertModel(CFG, add_pooler=False).apply({"params": params["bert"]}, IDS, MASK,
                                               SEG)["sequence_output"]
  pooled = np.stack([seq[0].mean(0), seq[1, :6].mean(0)])       # row 1 has 6 real tokens
  k, b = params["classifier"]["kernel"], params["classifier"]["bias"]
  np.testing.assert_allclose(out, pooled @ k + b, atol=1e-5)
