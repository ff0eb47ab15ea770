"""StableAdamW: AdamW with Adafactor's update clipping, per parameter tensor.

Wortsman et al. 2023, "Stable and low-precision training for large-scale vision-language
models" (arXiv:2304.13013), Algorithm 2; ModernBERT (Warner et al. 2024) trains with it.
We follow the paper and optimi's StableAdamW (warner-benjamin/optimi, optimi/stableadamw.py,
`_single_param_stableadamw`, its default decouple_lr=False). For each tensor θ with gradient
g_t, at step t = 1, 2, ...:

  m_t = β1 m_{t-1} + (1 - β1) g_t,     m̂_t = m_t / (1 - β1^t)
  v_t = β2 v_{t-1} + (1 - β2) g_t²,    v̂_t = v_t / (1 - β2^t)
  RMS_t = sqrt(mean(g_t² / max(v̂_t, ε²)))       the mean over the tensor's elements
  η_t = γ_t / max(1, RMS_t)
  θ_t = θ_{t-1} - η_t (m̂_t / (sqrt(v̂_t) + ε) + λ θ_{t-1})

- v̂_t in RMS_t is the bias-corrected second moment that already holds g_t: optimi (and
  Alg. 2) keep the averages debiased with β̂ = β (1 - β^(t-1)) / (1 - β^t), which gives
  exactly m̂_t and v̂_t above.
- ε² floors RMS_t's denominator, so a tensor whose gradients were all zero gets no 0/0;
  in the Adam step ε sits outside the square root, as in optax.adam and torch.
- The weight decay λ θ (decoupled, masked like optax.adamw's) takes the same clipped η_t.

RMS_t > 1 means this step's gradient is large against v̂_t (a stale second moment: a
rarely seen embedding row, a loss spike), where Adam's step would overshoot; the tensor's
step shrinks by that factor instead (the paper's §3.4). So no tensor ever moves further
than Adam would with up-to-date moments, which is why the recipe needs no gradient clipping.

A leaf marked in `stacked` holds independent tensors on axis 0 (a scanned layer stack,
[layers, ...]): each slice gets its own RMS_t, so a scanned model steps as the unrolled one.
The moments are float32 whatever the param dtype; the update has the gradient's dtype.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Union

import jax
import jax.numpy as jnp
import optax

# A pytree of bools shaped like the params, or a function of the params returning one.
TreeOrFn = Union[Any, Callable[[Any], Any], None]


class ScaleByStableAdamState(NamedTuple):
  count: jax.Array        # int32 [], steps taken
  mu: optax.Updates       # float32 first moments
  nu: optax.Updates       # float32 second moments
  decay: optax.OptState   # the (masked) add_decayed_weights state: no arrays


def _tree(tree_or_fn: TreeOrFn, updates, default: bool):
  if tree_or_fn is None:
    return jax.tree_util.tree_map(lambda _: default, updates)
  return tree_or_fn(updates) if callable(tree_or_fn) else tree_or_fn


def update_scale(g: jax.Array, v_hat: jax.Array, eps: float, stacked: bool) -> jax.Array:
  """1 / max(1, RMS_t) of one tensor (per axis-0 slice if `stacked`), float32, broadcastable
  against g."""
  g = g.astype(jnp.float32)
  axes = tuple(range(1 if stacked and g.ndim else 0, g.ndim))
  rms = jnp.sqrt(jnp.mean(g * g / jnp.maximum(v_hat, eps * eps), axis=axes, keepdims=True))
  return 1.0 / jnp.maximum(1.0, rms)


def scale_by_stable_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                         weight_decay: float = 0.0, mask: TreeOrFn = None,
                         stacked: TreeOrFn = None) -> optax.GradientTransformation:
  """(m̂_t / (sqrt(v̂_t) + ε) + λ θ_{t-1}) / max(1, RMS_t) per tensor: the StableAdamW step
  before the learning rate (module docstring). The decay λ θ goes in before the clip, so
  it takes the clipped rate too; `mask` selects the decayed params as optax.adamw's does,
  `stacked` the leaves whose axis 0 splits into separately clipped tensors."""
  decay = optax.add_decayed_weights(weight_decay, mask)
  no_decay = not callable(weight_decay) and weight_decay == 0

  def init(params):
    def zeros(p):
      return jnp.zeros(p.shape, jnp.float32)  # float32 moments for bfloat16 params too
    return ScaleByStableAdamState(jnp.zeros([], jnp.int32), jax.tree_util.tree_map(zeros, params),
                                  jax.tree_util.tree_map(zeros, params), decay.init(params))

  def update(updates, state, params=None):
    count = optax.safe_int32_increment(state.count)
    t = count.astype(jnp.float32)
    mu = jax.tree_util.tree_map(
        lambda g, m: b1 * m + (1 - b1) * g.astype(jnp.float32), updates, state.mu)
    nu = jax.tree_util.tree_map(
        lambda g, v: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)), updates, state.nu)
    c1, c2 = 1 - b1 ** t, 1 - b2 ** t  # bias corrections
    adam = jax.tree_util.tree_map(lambda m, v: (m / c1) / (jnp.sqrt(v / c2) + eps), mu, nu)
    scales = jax.tree_util.tree_map(lambda g, v, s: update_scale(g, v / c2, eps, bool(s)),
                                    updates, nu, _tree(stacked, updates, False))
    decay_state = state.decay
    if not no_decay:
      adam, decay_state = decay.update(adam, state.decay, params)
    out = jax.tree_util.tree_map(lambda a, s, g: (a * s).astype(g.dtype), adam, scales, updates)
    return out, ScaleByStableAdamState(count, mu, nu, decay_state)

  return optax.GradientTransformation(init, update)


def stable_adamw(learning_rate: optax.ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 1e-4, mask: TreeOrFn = None,
                 stacked: TreeOrFn = None) -> optax.GradientTransformation:
  """StableAdamW as optax.adamw's drop-in: the same arguments (a float or a schedule for
  the rate, the decay mask), plus `stacked` (scale_by_stable_adam)."""
  return optax.chain(
      scale_by_stable_adam(b1, b2, eps, weight_decay=weight_decay, mask=mask, stacked=stacked),
      optax.scale_by_learning_rate(learning_rate))
