"""Pure train_step / eval_step, shared by every task. Jitted once, in train/loop.py.

A task supplies the model application and its loss/metric terms (see
`bert_jax/tasks/pretraining.py`); these functions own the mechanics: dropout rng from
`fold_in(rng, step)`, exact gradient accumulation, the optimizer update and the guard
that keeps a non-finite step from touching the state.
"""
from __future__ import annotations

from typing import Any, Callable

import flax.struct
import jax
import jax.numpy as jnp
import optax

from bert_jax.runtime import parallel


@flax.struct.dataclass
class TrainState:
  step: jax.Array       # int32 []
  params: Any
  opt_state: Any
  rng: jax.Array        # uint32 [2] raw key data (checkpoints store plain arrays)


def create_state(params, tx: optax.GradientTransformation, seed_key: jax.Array) -> TrainState:
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=tx.init(params), rng=jax.random.key_data(seed_key))


def check_precision(model_config) -> None:
  """Refuses float16 training in one line: these steps have no loss scaling, so small
  float16 gradients would flush to zero and large ones overflow into the non-finite
  guard, which skips or stops the run. bfloat16 has float32's range and the same
  tensor-core speed on the GPUs cuDNN's fused attention runs on (Ampere and newer)."""
  for name in ("dtype", "param_dtype", "matmul_dtype"):
    if str(getattr(model_config, name, None) or "") == "float16":
      raise ValueError(f"model.{name}=float16: training has no loss scaling here; use "
                       f"--config.model.{name}=bfloat16 (float32's range, same speed).")


def _microbatches(batch, k: int):
  """[B, ...] -> [k, B/k, ...] with strided rows, so every data shard keeps an equal
  slice of each microbatch (no cross-device shuffle)."""
  def split(x):
    if x.shape[0] % k:
      raise ValueError(f"batch of {x.shape[0]} is not divisible by grad_accum_steps={k}")
    return jnp.swapaxes(x.reshape((x.shape[0] // k, k) + x.shape[1:]), 0, 1)
  return jax.tree_util.tree_map(split, batch)


def _sum_terms(task, params, batch, rng, totals):
  """(loss, metric sums) of one (micro)batch; loss = Σ_parts part_sum / full-batch weight."""
  out = parallel.spread_over_all_devices(task.apply(params, batch, rng, train=True))
  parts = task.loss_parts(out, batch)
  loss = sum(parts[name] / totals[name] for name in parts)
  return loss, task.metric_sums(out, batch)


def train_step(state: TrainState, batch, *, task, tx: optax.GradientTransformation,
               schedule: Callable, accum_steps: int = 1):
  """One optimizer step. Returns (new_state, metrics dict of scalars).

  With accum_steps = k the batch is split into k microbatches whose gradients are summed;
  each microbatch's loss is normalized by the whole batch's weights, so the result equals
  the single k-times-larger batch (up to float summation order).
  """
  rng = jax.random.fold_in(jax.random.wrap_key_data(state.rng), state.step)
  totals = {k: jnp.maximum(v, 1e-9) for k, v in task.loss_weights(batch).items()}
  grad_fn = jax.value_and_grad(_sum_terms, argnums=1, has_aux=True)
  if accum_steps == 1:
    (loss, sums), grads = grad_fn(task, state.params, batch, rng, totals)
  else:
    micro = _microbatches(batch, accum_steps)

    def body(carry, xs):
      loss_acc, sums_acc, grads_acc = carry
      i, mb = xs
      (l, s), g = grad_fn(task, state.params, mb, jax.random.fold_in(rng, i), totals)
      add = lambda a, b: jax.tree_util.tree_map(jnp.add, a, b)
      return (loss_acc + l, add(sums_acc, s), add(grads_acc, g)), None

    zeros_g = jax.tree_util.tree_map(jnp.zeros_like, state.params)
    first = jax.tree_util.tree_map(lambda x: x[0], micro)
    sums_shape = jax.eval_shape(lambda mb: _sum_terms(task, state.params, mb, rng, totals)[1],
                                first)  # abstract: traces, computes nothing
    zero_sums = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), sums_shape)
    (loss, sums, grads), _ = jax.lax.scan(
        body, (jnp.zeros((), jnp.float32), zero_sums, zeros_g),
        (jnp.arange(accum_steps), micro))

  new_params, new_opt_state, grad_norm, finite = optimizer_update(
      tx, grads, loss, state.params, state.opt_state)
  new_state = state.replace(step=state.step + 1, params=new_params, opt_state=new_opt_state)
  metrics = {"loss": loss, "grad_norm": grad_norm, "learning_rate": schedule(state.step),
             "finite": finite.astype(jnp.float32)}
  metrics.update(task.metric_ratios(sums))
  return new_state, metrics


def optimizer_update(tx: optax.GradientTransformation, grads, loss, params, opt_state):
  """(new params, new optimizer state, gradient global norm, finite): the optimizer's
  update of `params` by `grads` under the non-finite guard (a non-finite loss or
  gradient norm leaves both as they were). Also tools/optimizer_update.py's subject."""
  grad_norm = optax.global_norm(grads)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

  def update():
    updates, new_opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), new_opt_state

  new_params, new_opt_state = guarded_update(finite, update, (params, opt_state))
  return new_params, new_opt_state, grad_norm, finite


def guarded_update(finite, update: Callable, old):
  """update() where `finite`, else `old` unchanged: a non-finite step leaves params and
  optimizer state as they were; the loop then either stops with an error naming the
  step or (skip_nonfinite) carries on.

  Per platform (parallel.trace_platform), the same semantics:
  - GPU and TPU: a select, elementwise, fused into the optimizer update's own pass over
    the params and Adam moments, so it costs no pass of its own. XLA:GPU runs a
    conditional's predicate through the host (its conditional thunk copies it back and
    waits), so a cond would stall the host every step until forward and backward finish,
    and with it the dispatch of the next step. On TPU a cond's boundary keeps XLA from
    fusing the gradients' float32 casts into the update and from sharing the gradient
    norm of the guard with the one optax's clipping computes inside the branch: both
    become passes over every gradient of their own (the TPU compiler's estimate of the
    step: docs/performance-notes.md, "The optimizer guard on TPU").
  - CPU: a cond; only the taken branch runs.
  """
  if parallel.trace_platform() in ("gpu", "tpu"):
    new = update()
    return jax.tree_util.tree_map(lambda n, o: jnp.where(finite, n, o), new, old)
  return jax.lax.cond(finite, lambda _: update(), lambda _: old, None)


def eval_step(params, batch, *, task):
  """Metric numerators/denominators of one eval batch (summed over batches by the loop)."""
  out = parallel.spread_over_all_devices(task.apply(params, batch, None, train=False))
  return task.metric_sums(out, batch)


def predict_step(params, batch, *, task):
  """Per-row outputs of one eval batch (logits, ...) for metrics computed on the host."""
  return task.predict_outputs(task.apply(params, batch, None, train=False), batch)
