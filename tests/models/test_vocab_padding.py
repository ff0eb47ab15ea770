"""A vocabulary padded to TransformerConfig.vocab_multiple computes what the unpadded one
does: the same logits (over the tokenizer's ids only), loss, accuracy and gradients,
whatever the padding rows hold; configs pad to 128 x tensor by themselves; unpadded
params (HF, old checkpoints) load into a padded model and a padded model exports unpadded.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.checkpoint import manager as checkpoint
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.param_layout import pad_rows
from bert_jax.models.bert import BertForPreTraining
from bert_jax.models.gpt import GPT
from bert_jax.train import defaults, losses

VOCAB = 122  # the HF fixtures' WordPiece vocabulary: not a multiple of anything useful
TINY = dict(vocab_size=VOCAB, hidden_size=16, num_layers=2, num_heads=4, mlp_dim=32,
            max_len=16, dropout_rate=0.0, attention_dropout_rate=0.0, deterministic=True)


def _padded_copy(params, padded_template, seed=0):
  """params padded to the template's rows, the padding rows then filled with noise: no
  padding row may change a thing, zero or not."""
  padded = checkpoint.pad_vocab_rows(jax.device_get(params), jax.device_get(padded_template))
  rng = np.random.default_rng(seed)

  def noise(path, x):
    key = jax.tree_util.keystr(path)
    if checkpoint._is_vocab_rows(key) and x.shape[0] > VOCAB:  # pylint: disable=protected-access
      x = np.array(x)
      x[VOCAB:] = rng.standard_normal(x[VOCAB:].shape)
    return x
  return jax.tree_util.tree_map_with_path(noise, padded)


def _batch(rng, batch=3, length=12, preds=4):
  ids = rng.integers(1, VOCAB, size=(batch, length)).astype(np.int32)
  return dict(input_ids=ids, input_mask=np.ones_like(ids), segment_ids=np.zeros_like(ids),
              masked_lm_positions=rng.integers(0, length, size=(batch, preds)).astype(np.int32))


def test_bert_logits_loss_accuracy_and_gradients_equal_the_unpadded_model():
  plain, padded_cfg = TransformerConfig(**TINY), TransformerConfig(**TINY, vocab_multiple=128)
  assert padded_cfg.padded_vocab == 128
  rng = np.random.default_rng(0)
  batch = _batch(rng)
  labels = rng.integers(1, VOCAB, size=(3, 4)).astype(np.int32)
  model, padded_model = BertForPreTraining(plain), BertForPreTraining(padded_cfg)
  # Jitted init, apply and gradients: one compile each instead of op-by-op dispatch.
  params = nn.unbox(jax.jit(model.init)(jax.random.key(0), **batch)["params"])
  template = nn.unbox(jax.eval_shape(padded_model.init, jax.random.key(1), **batch)["params"])
  assert template["bert"]["embeddings"]["token_embedder"]["embedding"].shape == (128, 16)
  assert template["mlm_head"]["bias"].shape == (128,)
  padded = _padded_copy(params, template)

  def loss(m, p):
    logits = m.apply({"params": p}, **batch)["mlm_logits"]
    return losses.softmax_cross_entropy(logits, labels), (logits, losses.correct_count(
        logits, labels))
  grads = lambda m, p: jax.jit(jax.value_and_grad(lambda q: loss(m, q), has_aux=True))(p)
  (l0, (z0, c0)), g0 = grads(model, params)
  (l1, (z1, c1)), g1 = grads(padded_model, padded)
  assert z1.shape == z0.shape == (3, 4, VOCAB)   # the tokenizer's ids, no padding column
  np.testing.assert_allclose(z1, z0, atol=1e-6, rtol=0)
  assert float(l1) == pytest.approx(float(l0), abs=1e-5) and float(l0) > 1.0
  assert float(c1) == float(c0)
  # The real rows' gradients are the unpadded ones; the padding rows' are exactly zero, so
  # training never moves them.
  table = lambda g: g["bert"]["embeddings"]["token_embedder"]["embedding"]
  np.testing.assert_allclose(table(g1)[:VOCAB], table(g0), atol=1e-6, rtol=0)
  np.testing.assert_allclose(g1["mlm_head"]["bias"][:VOCAB], g0["mlm_head"]["bias"], atol=1e-6)
  assert not np.any(table(g1)[VOCAB:]) and not np.any(g1["mlm_head"]["bias"][VOCAB:])


def test_gpt_logits_equal_the_unpadded_model():
  cfg = dict(TINY, type_vocab_size=0, pre_ln=True, activation="gelu_tanh")
  plain, padded_cfg = TransformerConfig(**cfg), TransformerConfig(**cfg, vocab_multiple=64)
  ids = jnp.asarray(np.random.default_rng(1).integers(0, VOCAB, size=(2, 10)), jnp.int32)
  params = nn.unbox(GPT(plain).init(jax.random.key(0), ids)["params"])
  # Only the padded model's shapes are needed: the padding rows are filled with noise.
  template = nn.unbox(jax.eval_shape(GPT(padded_cfg).init, jax.random.key(0), ids)["params"])
  padded = _padded_copy(params, template)
  z0 = GPT(plain).apply({"params": params}, ids)
  z1 = GPT(padded_cfg).apply({"params": padded}, ids)
  assert z1.shape == (2, 10, VOCAB)
  np.testing.assert_allclose(z1, z0, atol=1e-6, rtol=0)
  assert int(jnp.argmax(z1[0, -1])) == int(jnp.argmax(z0[0, -1]))  # greedy decoding


@pytest.mark.parametrize("mesh_shape, multiple, rows", [
    ((-1, 4, 1), 128, 30592), ((-1, 8, 4), 512, 30720), ((2, 2, 2), 256, 30720),
    ((1, 1, -1), 128, 30592)])
def test_configs_pad_to_128_times_tensor(mesh_shape, multiple, rows):
  config = defaults.bert_pretraining_config("bert/base")
  assert config.model.vocab_multiple == 0 and config.model.vocab_size == 30522
  config.mesh_shape = mesh_shape
  cfg = defaults.transformer_config(config, "tpu")
  assert (cfg.vocab_multiple, cfg.padded_vocab, cfg.vocab_size) == (multiple, rows, 30522)
  config.model.vocab_multiple = 1   # a user's explicit choice wins
  assert defaults.transformer_config(config, "tpu").padded_vocab == 30522


def test_bad_vocab_multiple_is_one_clear_error():
  with pytest.raises(ValueError, match=r"vocab_multiple=-2; expected a positive integer"):
    TransformerConfig(vocab_multiple=-2)


def test_pad_rows_and_an_unpadded_checkpoint_names_the_fix():
  x = np.arange(6, dtype=np.float32).reshape(3, 2)
  np.testing.assert_array_equal(pad_rows(x, 5), [[0, 1], [2, 3], [4, 5], [0, 0], [0, 0]])
  assert pad_rows(x, 3) is not None and pad_rows(x, 3).shape == (3, 2)
  saved = {"bert": {"embeddings": {"token_embedder": {"embedding": np.zeros((122, 4))}}}}
  model = {"bert": {"embeddings": {"token_embedder": {"embedding": np.zeros((128, 4))}}}}
  with pytest.raises(checkpoint.CheckpointMismatchError,
                     match=r"(?s)checkpoint \(122, 4\) vs model \(128, 4\).*"
                           r"--config.model.vocab_multiple=1 for one saved unpadded"):
    checkpoint.check_compatible(saved, model, "old")
  checkpoint.check_compatible(checkpoint.pad_vocab_rows(saved, model), model, "old")
