"""Skip-gram with negative sampling (Mikolov et al. 2013), the word2vec model.

Two tables: T ("target", the centre word's input vector, the one exported as the word
vectors, gensim's `wv.vectors` / syn0) and C ("context", the output vectors, gensim's
syn1neg). A pair (centre w, context c) with k negatives n_1..n_k scores

    logits = [T[w] . C[c], T[w] . C[n_1], ..., T[w] . C[n_k]]          # [k + 1]
    loss   = BCE-with-logits(logits, [1, 0, ..., 0]), summed over the k + 1 terms,

which is -log s(T[w].C[c]) - sum_j log s(-T[w].C[n_j]) (s = sigmoid), the SGNS objective.

Training never forms a gradient of the tables: the step gathers the rows a batch touches,
`row_grads` gives the gradient with respect to those rows, and SGD scatter-adds them back
(see bert_jax/word2vec/step.py). The loss and its row gradients live beside the module,
not in it (t5x keeps loss_fn next to the model the same way).
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array

# Logical axis names of both tables: rows over the model ("tensor") axis and columns over
# fsdp, through parallel.LOGICAL_RULES.
TABLE_AXES = ("vocab", "embed")


# Half-widths of the initial T rows, in units of 1/dim (config.model.init_scale).
GENSIM4_INIT_SCALE = 1.0     # gensim 4's KeyedVectors.prep_vectors: (2 u - 1) / dim
WORD2VEC_C_INIT_SCALE = 0.5  # word2vec.c's and gensim 3's: (u - 0.5) / dim


def check_init_scale(scale: float) -> None:
  if not scale > 0:
    # All-zero T and C (C starts at zero) have zero gradients: nothing would ever train.
    raise ValueError(f"word2vec: model.init_scale must be > 0, got {scale} (gensim 4's "
                     f"{GENSIM4_INIT_SCALE}, word2vec.c's {WORD2VEC_C_INIT_SCALE}).")


def target_init(scale: float = GENSIM4_INIT_SCALE):
  """Initializer of T: uniform in [-scale/dim, scale/dim), dim the row length."""
  check_init_scale(scale)

  def init(key, shape, dtype=jnp.float32):
    half = scale / shape[-1]
    return jax.random.uniform(key, shape, dtype, minval=-half, maxval=half)
  return init


class SkipGram(nn.Module):
  """The two SGNS tables; calling it scores (centre, candidates) pairs."""
  vocab_size: int
  embed_dim: int = 100
  init_scale: float = GENSIM4_INIT_SCALE
  param_dtype: jnp.dtype = jnp.float32

  def setup(self):
    shape = (self.vocab_size, self.embed_dim)
    # Context vectors start at zero (as in word2vec.c and gensim): the first updates of T
    # are then zero too, and only C moves until it carries signal.
    self.target = self.param(
        "target", nn.with_logical_partitioning(target_init(self.init_scale), TABLE_AXES), shape,
        self.param_dtype)
    self.context = self.param(
        "context", nn.with_logical_partitioning(nn.initializers.zeros, TABLE_AXES), shape,
        self.param_dtype)

  def __call__(self, centers: Array, candidates: Array) -> Array:
    """centers [batch], candidates [batch, k + 1] (true context first) -> logits [batch, k + 1]."""
    t = jnp.take(self.target, centers, axis=0)        # [batch, d]
    c = jnp.take(self.context, candidates, axis=0)    # [batch, k + 1, d]
    return pair_logits(t, c)


def pair_logits(t: Array, c: Array) -> Array:
  """t [batch, d], c [batch, k + 1, d] -> [batch, k + 1] dot products."""
  return jnp.einsum("bd,bkd->bk", t, c)


def sgns_labels(logits: Array) -> Array:
  """1 for the true context (column 0), 0 for the k negatives: [batch, k + 1]."""
  return jnp.zeros_like(logits).at[:, 0].set(1.0)


def sgns_loss(logits: Array, weights: Array) -> Array:
  """Per-pair SGNS loss [batch]: BCE with logits summed over the k + 1 columns, times weights.

  weights [batch] is 1 for real pairs and 0 for padding.
  """
  labels = sgns_labels(logits)
  # softplus(x) - y x == -y log s(x) - (1 - y) log s(-x), stable for large |x|.
  bce = jax.nn.softplus(logits) - labels * logits     # [batch, k + 1]
  return jnp.sum(bce, axis=-1) * weights


def logit_grads(logits: Array, weights: Array) -> Array:
  """d(sum of sgns_loss)/d logits = (sigmoid(logits) - labels) * weights: [batch, k + 1]."""
  return (jax.nn.sigmoid(logits) - sgns_labels(logits)) * weights[:, None]


def row_grads(t: Array, c: Array, weights: Array) -> tuple[Array, Array, Array]:
  """Loss and the gradient of the summed loss with respect to the gathered rows.

  Args:
    t: [batch, d] centre rows T[centers].
    c: [batch, k + 1, d] candidate rows C[[context, negatives...]].
    weights: [batch] pair weights (0 for padding).

  Returns:
    (loss [batch], d/dt [batch, d], d/dc [batch, k + 1, d]). A row that occurs several
    times in the batch gets one gradient per occurrence; scatter-adding them sums them.
  """
  logits = pair_logits(t, c)                          # [batch, k + 1]
  g = logit_grads(logits, weights)                    # [batch, k + 1]
  grad_t = jnp.einsum("bk,bkd->bd", g, c)             # [batch, d]
  grad_c = g[:, :, None] * t[:, None, :]              # [batch, k + 1, d]
  return sgns_loss(logits, weights), grad_t, grad_c
