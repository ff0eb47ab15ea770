"""The two pretraining steps bench/train_step/train_step.py times, on the same batch: ours
as train/loop.py builds and jits it, and transformers' FlaxBertForPreTraining with our
optimizer (the PyTorch side is bench/train_step/torch_worker.py, in its own venv).
"""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from bert_jax.runtime import parallel
from bert_jax.tasks.pretraining import PretrainingTask
from bert_jax.train import optim
from bert_jax.train.defaults import base_config, train_config
from bert_jax.train.loop import create_sharded_state, jit_steps


# --------------------------------------------------------------------------- the batch
def make_batch(batch: int, seq: int, max_preds: int, vocab: int, seed: int = 0) -> dict:
  """One google-research/bert style batch: [CLS] A [SEP] B [SEP], 15% of tokens masked.

  90% of rows are full length, 10% shorter (short_seq_prob 0.1); per row
  min(max_preds, max(1, round(0.15 * tokens))) positions, never [CLS]/[SEP]/padding.
  """
  rng = np.random.default_rng(seed)
  cls_id, sep_id, mask_id, first_word = 101, 102, 103, 1000
  ids = np.zeros((batch, seq), np.int32)
  seg = np.zeros((batch, seq), np.int32)
  mask = np.zeros((batch, seq), np.int32)
  pos = np.zeros((batch, max_preds), np.int32)
  lm_ids = np.zeros((batch, max_preds), np.int32)
  lm_w = np.zeros((batch, max_preds), np.float32)
  for r in range(batch):
    n = seq if rng.random() >= 0.1 else int(rng.integers(8, seq))
    a = int(rng.integers(1, n - 3))  # tokens of sentence A; B gets the rest
    row = rng.integers(first_word, vocab, size=n).astype(np.int32)
    row[0], row[a + 1], row[n - 1] = cls_id, sep_id, sep_id
    ids[r, :n], mask[r, :n], seg[r, a + 2:n] = row, 1, 1
    candidates = [i for i in range(n) if row[i] not in (cls_id, sep_id)]
    k = min(max_preds, max(1, int(round(0.15 * n))))
    chosen = np.sort(rng.choice(candidates, size=k, replace=False))
    pos[r, :k], lm_ids[r, :k], lm_w[r, :k] = chosen, row[chosen], 1.0
    for i in chosen:  # 80% [MASK], 10% random, 10% unchanged
      u = rng.random()
      ids[r, i] = mask_id if u < 0.8 else (rng.integers(first_word, vocab) if u < 0.9 else row[i])
  return dict(input_ids=ids, input_mask=mask, segment_ids=seg, masked_lm_positions=pos,
              masked_lm_ids=lm_ids, masked_lm_weights=lm_w,
              next_sentence_labels=rng.integers(0, 2, size=batch).astype(np.int32))


def hf_batch(b: dict) -> dict:
  """The same batch as run_mlm_flax feeds it: labels [batch, seq], -100 off the masked tokens."""
  labels = np.full(b["input_ids"].shape, -100, np.int32)
  for r in range(labels.shape[0]):
    k = int(b["masked_lm_weights"][r].sum())
    labels[r, b["masked_lm_positions"][r, :k]] = b["masked_lm_ids"][r, :k]
  return dict(input_ids=b["input_ids"], attention_mask=b["input_mask"],
              token_type_ids=b["segment_ids"], labels=labels,
              next_sentence_label=b["next_sentence_labels"])


# ------------------------------------------------------------------------------- ours
def our_config(variant: str, overrides: dict, batch: int, seq: int, preds: int,
               attention_dropout: float) -> ml_collections.ConfigDict:
  c = base_config("bert_pretraining")
  c.model = ml_collections.ConfigDict(dict(
      # scan_layers None: the per-platform default of the pretraining configs
      # (train/defaults.default_for: unrolled up to 12 layers).
      variant=variant, dtype="float32", scan_layers=None, remat_policy="none",
      dropout_rate=0.1, attention_dropout_rate=attention_dropout))
  c.model.update(overrides)
  c.data = ml_collections.ConfigDict(dict(mode="nsp", max_seq_length=seq,
                                          max_predictions_per_seq=preds))
  c.train = train_config(batch_size=batch)  # BERT's optimizer and schedule
  return c


def build_ours(config):
  """(task, step fn, state): as train/loop.py builds and jits them, on a 1-device mesh."""
  task = PretrainingTask(config)
  tc = config.train
  tx, schedule = optim.make_optimizer(tc, int(tc.num_steps))
  mesh = parallel.create_mesh((1, 1, 1), devices=jax.devices()[:1])
  dummy = task.dummy_batch(tc.batch_size, config.data.max_seq_length,
                           config.data.max_predictions_per_seq)
  with mesh:
    state, state_sh, _ = create_sharded_state(task, tx, mesh, dummy, config.seed)
  p_train, _ = jit_steps(task, tx, schedule, tc, state_sh, mesh)

  def step(carry, batch):
    with mesh:
      new_state, m = p_train(carry, batch)
    return new_state, m["loss"]
  return task, step, state, (p_train, mesh)


# -------------------------------------------------------------------------- reference
def build_reference(model_cfg, config):
  """(step fn, carry, jitted step) of the HF Flax pretraining step with our optimizer."""
  from flax.training import common_utils, train_state  # pylint: disable=g-import-not-at-top
  from transformers import BertConfig, FlaxBertForPreTraining  # pylint: disable=g-import-not-at-top
  hf_cfg = BertConfig(
      vocab_size=model_cfg.vocab_size, hidden_size=model_cfg.hidden_size,
      num_hidden_layers=model_cfg.num_layers, num_attention_heads=model_cfg.num_heads,
      intermediate_size=model_cfg.d_mlp, hidden_act="gelu",
      hidden_dropout_prob=model_cfg.dropout_rate,
      attention_probs_dropout_prob=model_cfg.attention_dropout_rate,
      max_position_embeddings=model_cfg.max_len, type_vocab_size=model_cfg.type_vocab_size,
      layer_norm_eps=model_cfg.layer_norm_eps, initializer_range=model_cfg.init_std)
  seq = config.data.max_seq_length
  model = FlaxBertForPreTraining(hf_cfg, input_shape=(1, seq), seed=0, dtype=jnp.float32,
                                 _do_init=False)  # random init, jitted below; no download
  params = jax.jit(model.init_weights, static_argnums=1)(jax.random.PRNGKey(0), (1, seq))
  tx, _ = optim.make_optimizer(config.train, int(config.train.num_steps))
  state = train_state.TrainState.create(apply_fn=model.__call__, params=params, tx=tx)
  vocab = hf_cfg.vocab_size

  def train_step(state, batch, dropout_rng):
    dropout_rng, new_dropout_rng = jax.random.split(dropout_rng)

    def loss_fn(params):
      out = state.apply_fn(batch["input_ids"], batch["attention_mask"],
                           batch["token_type_ids"], params=params, dropout_rng=dropout_rng,
                           train=True)
      logits = out.prediction_logits                           # [batch, seq, vocab]
      labels = batch["labels"]
      label_mask = jnp.where(labels != -100, 1.0, 0.0)
      mlm = optax.softmax_cross_entropy(logits, common_utils.onehot(labels, vocab)) * label_mask
      mlm = mlm.sum() / label_mask.sum()
      nsp = optax.softmax_cross_entropy_with_integer_labels(
          out.seq_relationship_logits, batch["next_sentence_label"]).mean()
      return mlm + nsp

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss, new_dropout_rng

  p_train = jax.jit(train_step, donate_argnums=(0,))

  def step(carry, batch):
    st, rng = carry
    st, loss, rng = p_train(st, batch, rng)
    return (st, rng), loss
  return step, (state, jax.random.PRNGKey(1)), p_train
