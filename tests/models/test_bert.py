import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models.bert import BertForPreTraining, BertModel, dummy_inputs
from bert_jax.models.variants import VARIANTS, get_model_config
from tests.models.names import assert_every_param_named

TESTDATA = os.path.join(os.path.dirname(__file__), "..", "testdata")
TINY = get_model_config("bert/tiny", vocab_size=64, max_len=32, deterministic=True)


def _jit_apply(module, *args, **kwargs):
  """module.apply, jitted: one compile instead of hundreds of op-by-op dispatches."""
  return jax.jit(module.apply)(*args, **kwargs)


@pytest.fixture(scope="module")
def tiny_bert():
  model = BertForPreTraining(TINY)
  variables = jax.jit(model.init)(jax.random.key(0), **dummy_inputs(2, 12, 3))
  return model, variables


def _shapes(tree):
  return {"/".join(str(getattr(k, "key", k)) for k in path): list(leaf.shape)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def test_param_tree_matches_stored_shapes():
  cfg = get_model_config("bert/tiny")
  abstract = jax.eval_shape(lambda: BertForPreTraining(cfg).init(jax.random.key(0),
                                                                 **dummy_inputs()))
  got = _shapes(nn.meta.unbox(abstract["params"]))
  with open(os.path.join(TESTDATA, "bert_tiny_param_shapes.json")) as f:
    expect = json.load(f)
  assert got == expect


@pytest.mark.parametrize("scan", [False, True])
def test_every_param_has_logical_axis_names(scan):
  cfg = get_model_config("bert/tiny", scan_layers=scan, num_layers=2)
  assert_every_param_named(jax.eval_shape(
      lambda: BertForPreTraining(cfg).init(jax.random.key(0), **dummy_inputs()))["params"])


def test_masked_position_logits_equal_full_logits_gathered(tiny_bert):
  model, variables = tiny_bert
  ids = jax.random.randint(jax.random.key(1), (2, 12), 5, 64)
  mask = jnp.array([[1] * 12, [1] * 7 + [0] * 5])
  seg = jnp.array([[0] * 6 + [1] * 6, [0] * 4 + [1] * 3 + [0] * 5])
  positions = jnp.array([[1, 4, 11], [0, 2, 6]])
  part = _jit_apply(model, variables, ids, mask, seg, positions)
  full = _jit_apply(model, variables, ids, mask, seg, None)
  assert part["mlm_logits"].shape == (2, 3, 64) and full["mlm_logits"].shape == (2, 12, 64)
  gathered = np.take_along_axis(np.asarray(full["mlm_logits"]), np.asarray(positions)[..., None],
                                axis=1)
  np.testing.assert_allclose(part["mlm_logits"], gathered, atol=1e-5)
  np.testing.assert_allclose(part["nsp_logits"], full["nsp_logits"], atol=1e-6)


def test_padding_does_not_change_real_token_outputs(tiny_bert):
  _, variables = tiny_bert
  encoder = BertModel(TINY)
  params = {"params": variables["params"]["bert"]}
  ids = jax.random.randint(jax.random.key(2), (1, 7), 5, 64)
  padded = jnp.pad(ids, ((0, 0), (0, 5)))
  a = _jit_apply(encoder, params, ids)["sequence_output"]
  b = _jit_apply(encoder, params, padded,
                 (padded > 0).astype(jnp.int32) | (jnp.arange(12) < 7))
  np.testing.assert_allclose(a[0], b["sequence_output"][0, :7], atol=1e-5)


def test_packed_documents_are_independent(tiny_bert):
  """Two documents packed in one row (block-diagonal mask, restarted positions)
  encode exactly as each alone."""
  _, variables = tiny_bert
  encoder = BertModel(TINY, add_pooler=False)
  params = {"params": {k: v for k, v in variables["params"]["bert"].items() if k != "pooler"}}
  doc1 = jax.random.randint(jax.random.key(3), (1, 5), 5, 64)
  doc2 = jax.random.randint(jax.random.key(4), (1, 4), 5, 64)
  row = jnp.concatenate([doc1, doc2, jnp.zeros((1, 3), jnp.int32)], axis=1)   # [1, 12]
  packed_ids = jnp.array([[1] * 5 + [2] * 4 + [0] * 3])
  positions = jnp.array([list(range(5)) + list(range(4)) + [0] * 3])
  out = _jit_apply(encoder, params, row, (packed_ids > 0).astype(jnp.int32),
                   positions=positions, packed_segment_ids=packed_ids)["sequence_output"]
  alone1 = _jit_apply(encoder, params, doc1)["sequence_output"]
  alone2 = _jit_apply(encoder, params, doc2)["sequence_output"]
  np.testing.assert_allclose(out[0, :5], alone1[0], atol=1e-5)
  np.testing.assert_allclose(out[0, 5:9], alone2[0], atol=1e-5)


def test_bfloat16_compute_keeps_float32_params_and_logits():
  cfg = TINY.replace(dtype="bfloat16")
  model = BertForPreTraining(cfg)
  variables = jax.jit(model.init)(jax.random.key(0), **dummy_inputs(2, 12, 3))
  dtypes = {x.dtype for x in jax.tree_util.tree_leaves(nn.meta.unbox(variables["params"]))}
  assert dtypes == {jnp.dtype(jnp.float32)}
  out = _jit_apply(model, variables, **dummy_inputs(2, 12, 3))
  assert out["mlm_logits"].dtype == jnp.float32
  ref = _jit_apply(BertForPreTraining(TINY), variables, **dummy_inputs(2, 12, 3))
  # bf16 has ~3 significant digits: same answer, coarser.
  np.testing.assert_allclose(out["mlm_logits"], ref["mlm_logits"], atol=0.1)


def test_dropout_is_active_only_when_not_deterministic(tiny_bert):
  _, variables = tiny_bert
  train_model = BertForPreTraining(TINY.replace(deterministic=False))
  inputs = dummy_inputs(2, 12, 3)
  apply = jax.jit(train_model.apply)  # one compile for both draws: the keys are arguments
  a = apply(variables, **inputs, rngs={"dropout": jax.random.key(1)})
  b = apply(variables, **inputs, rngs={"dropout": jax.random.key(2)})
  assert not np.allclose(a["mlm_logits"], b["mlm_logits"])


def test_variants_table_and_unknown_names():
  assert {"bert/tiny", "bert/mini", "bert/small", "bert/medium", "bert/base", "bert/large",
          "transformer/base", "transformer/big"} <= set(VARIANTS)
  assert get_model_config("bert/base").num_layers == 12
  with pytest.raises(KeyError, match="bert/huge"):
    get_model_config("bert/huge")
  with pytest.raises(KeyError, match="hidden_szie"):
    get_model_config("bert/base", hidden_szie=3)


def _dots(jaxpr):
  """Every dot_general of a jaxpr, inside custom_vjp calls and other sub-jaxprs too."""
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's Jaxpr
        if hasattr(sub, "eqns"):
          yield from _dots(sub)


def test_matmul_dtype_reaches_the_tied_mlm_projection():
  """model.matmul_dtype casts the operands of the MLM head's product with the embedding
  table too, as the Dense layers': its logits are float32 sums of bf16 operands. (The
  head ignored it: the largest product of a pretraining step stayed float32.)"""
  cfg = TINY.replace(vocab_size=300, matmul_dtype="bfloat16")
  model = BertForPreTraining(cfg)
  inputs = dummy_inputs(2, 12, 3)
  variables = jax.eval_shape(model.init, jax.random.key(0), **inputs)
  jaxpr = jax.make_jaxpr(model.apply)(variables, **inputs).jaxpr
  head = [e for e in _dots(jaxpr) if e.outvars[0].aval.shape[-1] == cfg.padded_vocab]
  assert head, "no product with the vocabulary"
  for eqn in head:
    assert [v.aval.dtype for v in eqn.invars] == [jnp.dtype(jnp.bfloat16)] * 2
    assert eqn.outvars[0].aval.dtype == jnp.float32
