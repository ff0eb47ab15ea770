"""Optimizers (optax chains), learning-rate schedules and weight-decay masks.

BERT's recipe: Adam(β1 0.9, β2 0.999, ε 1e-6) with decoupled weight decay 0.01 that
skips LayerNorm params and biases, 10k warmup steps then linear decay to 0, and
global-norm clipping at 1.0. LAMB (You et al. 2019) is the large-batch alternative.
Optimizer state stays float32 whatever the compute dtype.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax

_NO_DECAY_LEAVES = ("bias", "scale")  # LayerNorm γ is "scale" in flax; all biases


def decay_mask(params):
  """True for params that get weight decay: every weight matrix/embedding, not LN or bias."""
  def keep(path, leaf):
    # The last dict key names the param (boxed params add a trailing `.value` attribute).
    keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return bool(keys) and str(keys[-1]) not in _NO_DECAY_LEAVES and leaf.ndim > 1
  return jax.tree_util.tree_map_with_path(keep, params)


def learning_rate_schedule(cfg: ml_collections.ConfigDict, total_steps: int) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then `schedule`: linear (to 0 at total_steps),
  inverse_sqrt (∝ 1/sqrt(step) after warmup, Vaswani et al.) or constant."""
  peak, warmup = cfg.learning_rate, int(cfg.warmup_steps)
  if cfg.schedule == "linear":
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, max(warmup, 1)),
         optax.linear_schedule(peak, 0.0, max(total_steps - warmup, 1))], [warmup])
  if cfg.schedule == "inverse_sqrt":
    def schedule(step):
      step = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
      warm = float(max(warmup, 1))
      return peak * jnp.minimum(step / warm, jnp.sqrt(warm / step))
    return schedule
  if cfg.schedule == "constant":
    return optax.join_schedules([optax.linear_schedule(0.0, peak, max(warmup, 1)),
                                 optax.constant_schedule(peak)], [warmup])
  raise ValueError(f"unknown train.schedule {cfg.schedule!r}: linear, inverse_sqrt, constant")


def make_optimizer(cfg: ml_collections.ConfigDict, total_steps: int):
  """(optax.GradientTransformation, schedule) from the `train` config section."""
  schedule = learning_rate_schedule(cfg, total_steps)
  if cfg.optimizer == "adamw":
    opt = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                      weight_decay=cfg.weight_decay, mask=decay_mask)
  elif cfg.optimizer == "lamb":
    opt = optax.lamb(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                     weight_decay=cfg.weight_decay, mask=decay_mask)
  elif cfg.optimizer == "sgd":
    opt = optax.sgd(schedule, momentum=cfg.get("momentum") or None)
  else:
    raise ValueError(f"unknown train.optimizer {cfg.optimizer!r}: adamw, lamb, sgd")
  chain = [opt]
  if cfg.grad_clip_norm and cfg.grad_clip_norm > 0:
    chain.insert(0, optax.clip_by_global_norm(cfg.grad_clip_norm))
  return optax.chain(*chain), schedule
