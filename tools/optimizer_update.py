"""The optimizer update of a fine-tuning step alone: our optax chain against one fused pass.

  .venv/bin/python tools/optimizer_update.py [--calls 10]

What issue 39's profile calls "optimizer" (69 ms of our packed step against torch's fused
AdamW's 24 ms): train/steps.py's own optimizer_update on CPU, i.e. the optax chain that train/optim.make_optimizer builds from configs/finetune_classification.py:
polarity's train section (global-norm clip 1.0, AdamW with the weight-decay mask, the
linear schedule) plus apply_updates, under the non-finite guard's cond; against the same
arithmetic written as one elementwise function per parameter (the clip factor from the
global norm the step already has, the Adam moments, bias corrections, decoupled decay
where the mask says, the learning rate), also under the cond. The parameters are
all-MiniLM-L6-v2's shapes and names (22.7M float32s; the 30,522 x 384 embedding table
is half of them); state donated as the loop donates it. Prints the best of 3 x --calls
for each, and the largest difference between their new parameters and moments (the
fused pass is the same update, not an approximation). The load average before and after.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The root, bench/ (bench_util) and the suites whose parts the probes reuse.
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "bench")] + [
    os.path.join(_ROOT, "bench", d) for d in ("time_to_quality", "finetune", "inference")]
from bert_jax import hardware  # noqa: E402  pylint: disable=wrong-import-position

hardware.configure()  # as the training CLI runs

import jax  # noqa: E402  pylint: disable=wrong-import-position
import jax.numpy as jnp  # noqa: E402  pylint: disable=wrong-import-position
import optax  # noqa: E402  pylint: disable=wrong-import-position

import bench_util  # noqa: E402  pylint: disable=wrong-import-position
from vs_trainer import configured  # noqa: E402  pylint: disable=wrong-import-position

L, H, F, VOCAB = 6, 384, 1536, 30522  # all-MiniLM-L6-v2


def params_like_minilm(key):
  """A parameter tree of all-MiniLM-L6-v2's shapes, with our names (scanned layers
  stacked on axis 0), so that the weight-decay mask picks the same leaves."""
  dense = lambda i, o: {"kernel": (L, i, o), "bias": (L, o)}
  shapes = {
      "embeddings": {"token_embedder": {"embedding": (VOCAB, H)},
                     "position_embedder": {"embedding": (512, H)},
                     "segment_embedder": {"embedding": (2, H)},
                     "norm": {"scale": (H,), "bias": (H,)}},
      "encoder": {"layers": {"attention": {n: dense(H, H) for n in ("query", "key", "value",
                                                                    "out")},
                             "attention_norm": {"scale": (L, H), "bias": (L, H)},
                             "mlp": {"wi": dense(H, F), "wo": dense(F, H)},
                             "mlp_norm": {"scale": (L, H), "bias": (L, H)}}},
      "pooler": {"kernel": (H, H), "bias": (H,)},
      "classifier": {"kernel": (H, 2), "bias": (2,)}}
  leaves, treedef = jax.tree_util.tree_flatten(shapes, is_leaf=lambda x: isinstance(x, tuple))
  keys = jax.random.split(key, len(leaves))
  return treedef.unflatten([0.02 * jax.random.normal(k, s) for k, s in zip(keys, leaves)])


def fused_update(train_cfg, schedule, decay, params, opt_state, grads, grad_norm):
  """The chain's update in one elementwise pass per leaf; the same state structure."""
  adam = next(s for s in jax.tree_util.tree_leaves(opt_state, is_leaf=lambda s: hasattr(s, "mu"))
              if hasattr(s, "mu"))  # optax's ScaleByAdamState inside the chain
  count = optax.safe_increment(adam.count)
  b1, b2, eps, wd = train_cfg.b1, train_cfg.b2, train_cfg.eps, train_cfg.weight_decay
  clip = jnp.minimum(1.0, train_cfg.grad_clip_norm / jnp.maximum(grad_norm, 1e-30))
  bc1 = 1 - b1 ** count.astype(jnp.float32)
  bc2 = 1 - b2 ** count.astype(jnp.float32)
  lr = schedule(adam.count)

  def leaf(p, g, m, v, decayed):
    g = g * clip
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    u = (m / bc1) / (jnp.sqrt(v / bc2) + eps)
    if decayed:
      u = u + wd * p
    return p - lr * u, m, v

  out = jax.tree_util.tree_map(leaf, params, grads, adam.mu, adam.nu, decay)
  pick = lambda i: jax.tree_util.tree_map(lambda o: o[i], out,
                                          is_leaf=lambda x: isinstance(x, tuple))
  new_adam = adam._replace(count=count, mu=pick(1), nu=pick(2))  # (the schedule's own
  # count in the chain's state is left as it was: this is a timing, not a drop-in)
  new_state = jax.tree_util.tree_map(lambda s: new_adam if s is adam else s, opt_state,
                                     is_leaf=lambda s: s is adam)
  return pick(0), new_state


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--calls", type=int, default=10)
  args = p.parse_args()
  from bert_jax.train import optim, steps  # pylint: disable=g-import-not-at-top
  print(f"optimizer_update: {bench_util.load_line('before')}", flush=True)
  train_cfg = configured({}).train
  tx, schedule = optim.make_optimizer(train_cfg, 1000)
  params = params_like_minilm(jax.random.key(0))
  grads = jax.tree_util.tree_map(lambda x: 0.5 * x, params_like_minilm(jax.random.key(1)))
  decay = optim.decay_mask(params)
  print(f"{sum(x.size for x in jax.tree_util.tree_leaves(params)):,} parameters; "
        f"{train_cfg.optimizer}, clip {train_cfg.grad_clip_norm}, wd {train_cfg.weight_decay}")

  def ours(params, opt_state):  # train_step's own update (a finite loss)
    return steps.optimizer_update(tx, grads, jnp.float32(0.0), params, opt_state)[:2]

  def fused(params, opt_state):
    grad_norm = optax.global_norm(grads)
    return jax.lax.cond(
        jnp.isfinite(grad_norm),
        lambda _: fused_update(train_cfg, schedule, decay, params, opt_state, grads, grad_norm),
        lambda _: (params, opt_state), None)

  results = {}
  for name, fn in (("optax chain (ours today)", ours), ("one fused pass", fused)):
    run = jax.jit(fn, donate_argnums=(0, 1))
    state = (jax.tree_util.tree_map(jnp.copy, params), tx.init(params))
    first = jax.tree_util.tree_map(jnp.copy, run(*state))  # after one update, kept
    state = run(*jax.tree_util.tree_map(jnp.copy, first))
    best = float("inf")
    for _ in range(3):
      t0 = time.perf_counter()
      for _ in range(args.calls):
        state = run(*state)
      jax.block_until_ready(state)
      best = min(best, (time.perf_counter() - t0) / args.calls)
    results[name] = first
    print(f"{name}: {1e3 * best:.1f} ms an update", flush=True)
  a, b = results.values()
  moments = lambda r: [(s.mu, s.nu) for s in jax.tree_util.tree_leaves(
      r[1], is_leaf=lambda s: hasattr(s, "mu")) if hasattr(s, "mu")]
  diff = max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(
      jax.tree_util.tree_leaves((a[0], moments(a))), jax.tree_util.tree_leaves((b[0], moments(b)))))
  print(f"largest difference after one update (params, Adam moments): {diff:.3g}")
  print(f"optimizer_update: {bench_util.load_line('after')}")


if __name__ == "__main__":
  main()
