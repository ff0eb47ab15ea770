"""Optimizers (optax chains), learning-rate schedules and weight-decay masks.

BERT's recipe: Adam(β1 0.9, β2 0.999, ε 1e-6) with decoupled weight decay 0.01 that
skips LayerNorm params and biases, 10k warmup steps then linear decay to 0, and
global-norm clipping at 1.0. LAMB (You et al. 2019) is the large-batch alternative;
StableAdamW with warmup-stable-decay (stable_adamw.py, schedule "wsd") is ModernBERT's.
Optimizer state stays float32 whatever the compute dtype.
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from bert_jax.train.stable_adamw import stable_adamw

_NO_DECAY_LEAVES = ("bias", "scale")  # LayerNorm γ is "scale" in flax; all biases


def decay_mask(params, embeddings: bool = True):
  """True for params that get weight decay: every weight matrix, not LN or bias; embedding
  tables too unless `embeddings` is False (GPT-2 / nanoGPT's recipe)."""
  skip = _NO_DECAY_LEAVES if embeddings else _NO_DECAY_LEAVES + ("embedding",)
  def keep(path, leaf):
    # The last dict key names the param (boxed params add a trailing `.value` attribute).
    keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return bool(keys) and str(keys[-1]) not in skip and leaf.ndim > 1
  return jax.tree_util.tree_map_with_path(keep, params)


def stacked_layers(params):
  """True for the leaves of a scanned layer stack (under a dict key "layers", nn.scan's
  layer axis first): StableAdamW clips each layer's slice as its own tensor."""
  def stacked(path, leaf):
    keys = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return "layers" in keys and leaf.ndim > 0
  return jax.tree_util.tree_map_with_path(stacked, params)


def learning_rate_schedule(cfg: ml_collections.ConfigDict, total_steps: int) -> optax.Schedule:
  """Linear warmup to `learning_rate`, then `schedule`: linear (to 0 at total_steps),
  cosine (to `min_lr_fraction` of the peak at total_steps, GPT-2/3), inverse_sqrt
  (∝ 1/sqrt(step) after warmup, Vaswani et al.), constant, or wsd (warmup-stable-decay,
  see _wsd_schedule)."""
  peak, warmup = cfg.learning_rate, int(cfg.warmup_steps)
  if cfg.get("warmup_fraction"):  # fine-tuning recipes: e.g. 10% of the steps
    warmup = int(round(cfg.warmup_fraction * total_steps))
  if cfg.schedule == "linear":
    return optax.join_schedules(
        [optax.linear_schedule(0.0, peak, max(warmup, 1)),
         optax.linear_schedule(peak, 0.0, max(total_steps - warmup, 1))], [warmup])
  if cfg.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(
        0.0, peak, max(warmup, 1), max(total_steps, warmup + 1),
        end_value=peak * float(cfg.get("min_lr_fraction", 0.0)))
  if cfg.schedule == "inverse_sqrt":
    def schedule(step):
      step = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
      warm = float(max(warmup, 1))
      return peak * jnp.minimum(step / warm, jnp.sqrt(warm / step))
    return schedule
  if cfg.schedule == "constant":
    return optax.join_schedules([optax.linear_schedule(0.0, peak, max(warmup, 1)),
                                 optax.constant_schedule(peak)], [warmup])
  if cfg.schedule == "wsd":
    return _wsd_schedule(peak, warmup, total_steps, float(cfg.get("decay_fraction", 0.1)),
                         float(cfg.get("min_lr_fraction", 0.0)))
  raise ValueError(f"unknown train.schedule {cfg.schedule!r}: linear, cosine, inverse_sqrt, "
                   "constant, wsd")


def _wsd_schedule(peak: float, warmup: int, total_steps: int, decay_fraction: float,
                  floor_fraction: float) -> optax.Schedule:
  """Warmup-stable-decay with the 1-sqrt cooldown (Hägele et al. 2024, "Scaling Laws and
  Compute-Optimal Training Beyond Fixed Training Durations"; ModernBERT's schedule).

  Linear warmup to `peak` over `warmup` steps, `peak` until t0 = total_steps - D with
  D = round(decay_fraction * total_steps) (t0 no earlier than the warmup's end), then
  lr(t) = peak (f + (1 - f) (1 - sqrt((t - t0) / D))), f = floor_fraction (0: down to 0 at
  total_steps, Hägele's form), f * peak after. A fraction, not a step count, so a sweep
  over run lengths keeps the schedule's shape.
  """
  warm = float(max(warmup, 1))
  t0 = float(max(total_steps - int(round(decay_fraction * total_steps)), warmup))
  span = max(float(total_steps) - t0, 1.0)

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    x = jnp.clip((step - t0) / span, 0.0, 1.0)
    decay = floor_fraction + (1.0 - floor_fraction) * (1.0 - jnp.sqrt(x))
    return peak * jnp.minimum(step / warm, 1.0) * decay
  return schedule


def make_optimizer(cfg: ml_collections.ConfigDict, total_steps: int):
  """(optax.GradientTransformation, schedule) from the `train` config section."""
  schedule = learning_rate_schedule(cfg, total_steps)
  decay_embeddings = cfg.get("decay_embeddings", True)
  mask = decay_mask if decay_embeddings else lambda p: decay_mask(p, embeddings=False)
  if cfg.optimizer == "adamw":
    opt = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                      weight_decay=cfg.weight_decay, mask=mask)
  elif cfg.optimizer == "lamb":
    opt = optax.lamb(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                     weight_decay=cfg.weight_decay, mask=mask)
  elif cfg.optimizer == "sgd":
    opt = optax.sgd(schedule, momentum=cfg.get("momentum") or None)
  elif cfg.optimizer == "stable_adamw":  # its update clipping stands in for grad_clip_norm
    opt = stable_adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                       weight_decay=cfg.weight_decay, mask=mask, stacked=stacked_layers)
  else:
    raise ValueError(f"unknown train.optimizer {cfg.optimizer!r}: adamw, lamb, sgd, "
                     "stable_adamw")
  chain = [opt]
  if cfg.get("layerwise_lr_decay", 1.0) != 1.0:
    chain.append(scale_by_layer_depth(cfg.layerwise_lr_decay))
  if cfg.grad_clip_norm and cfg.grad_clip_norm > 0:
    chain.insert(0, optax.clip_by_global_norm(cfg.grad_clip_norm))
  return optax.chain(*chain), schedule


_LAYER = re.compile(r"^layers_(\d+)$")


def layer_depth_factors(tree, decay: float):
  """Per-leaf learning-rate factors of layer-wise decay (Clark et al. 2020, ELECTRA).

  With L encoder layers: task heads (and anything outside the encoder) 1, the pooler
  decay, layer i (0-based) decay^(L - i), the embeddings decay^(L + 1); so the lower
  a weight sits, the smaller its step. Scanned layers (`layers`, stacked on axis 0) get
  a [L, 1, ...] factor array; unrolled ones (`layers_i`) a scalar.
  """
  def names(path):
    return [str(k.key) for k in path if isinstance(k, jax.tree_util.DictKey)]

  paths = jax.tree_util.tree_flatten_with_path(tree)[0]
  num_layers = 0
  for path, leaf in paths:
    keys = names(path)
    if "layers" in keys:
      num_layers = max(num_layers, leaf.shape[0])
    num_layers = max([num_layers] + [int(m.group(1)) + 1 for m in map(_LAYER.match, keys) if m])

  def factor(path, leaf):
    keys = names(path)
    if "embeddings" in keys:
      return decay ** (num_layers + 1)
    if "layers" in keys:
      depth = num_layers - np.arange(leaf.shape[0])
      return (decay ** depth).reshape((-1,) + (1,) * (leaf.ndim - 1)).astype(np.float32)
    for k in keys:
      m = _LAYER.match(k)
      if m:
        return decay ** (num_layers - int(m.group(1)))
    return decay if "pooler" in keys else 1.0
  return jax.tree_util.tree_map_with_path(factor, tree)


def scale_by_layer_depth(decay: float) -> optax.GradientTransformation:
  """Multiplies each update by its layer_depth_factors (after the learning rate)."""
  def update(updates, state, params=None):
    del params
    factors = layer_depth_factors(updates, decay)
    return jax.tree_util.tree_map(lambda u, f: u * jnp.asarray(f, u.dtype), updates,
                                  factors), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)
