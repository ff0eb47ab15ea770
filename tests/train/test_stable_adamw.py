"""StableAdamW (train/stable_adamw.py) against its formula in numpy, and the wsd schedule."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.train import optim
from bert_jax.train.defaults import train_config
from bert_jax.train.stable_adamw import stable_adamw

B1, B2, EPS, LR, WD = 0.9, 0.999, 1e-8, 0.1, 0.5
MASK = {"w": True, "b": False}  # decay the matrix, not the bias


def _reference(params, grads, lr=LR, wd=WD, mask=MASK):
  """The module docstring's algorithm in float64 numpy, tensor by tensor: each step's
  params, RMS_t and update (θ_t - θ_{t-1})."""
  p = {k: np.asarray(v, np.float64) for k, v in params.items()}
  m = {k: np.zeros_like(v) for k, v in p.items()}
  v = {k: np.zeros_like(x) for k, x in p.items()}
  trajectory, rms, steps = [], [], []
  for t, g in enumerate(grads, start=1):
    step_rms, before = {}, dict(p)
    for k in p:
      gk = np.asarray(g[k], np.float64)
      m[k] = B1 * m[k] + (1 - B1) * gk
      v[k] = B2 * v[k] + (1 - B2) * gk ** 2
      m_hat, v_hat = m[k] / (1 - B1 ** t), v[k] / (1 - B2 ** t)
      step_rms[k] = np.sqrt(np.mean(gk ** 2 / np.maximum(v_hat, EPS ** 2)))
      eta = lr / max(1.0, step_rms[k])
      decay = wd * p[k] if mask[k] else 0.0
      p[k] = p[k] - eta * (m_hat / (np.sqrt(v_hat) + EPS) + decay)
    trajectory.append({k: x.copy() for k, x in p.items()})
    rms.append(step_rms)
    steps.append({k: p[k] - before[k] for k in p})
  return trajectory, rms, steps


def _run(tx, params, grads):
  """Each step's params and updates."""
  state, out, steps = tx.init(params), [], []
  for g in grads:
    updates, state = tx.update(g, state, params)
    params = optax.apply_updates(params, updates)
    out.append(params)
    steps.append(updates)
  return out, steps


PARAMS = {"w": jnp.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]),
          "b": jnp.array([0.7, -0.45, 0.35])}
G_W = np.array([[0.01, -0.02, 0.03], [0.02, 0.01, -0.01]])
G_B = np.array([3.0, -1.0, 2.0])
# w: a small gradient then one 10x larger (clipped); b: shrinking gradients (never clipped).
GRADS = [{"w": jnp.asarray(G_W * s), "b": jnp.asarray(G_B * r)}
         for s, r in ((1.0, 1.0), (10.0, 0.5), (10.0, 0.25))]


def test_matches_the_formula_with_clipping_on_one_tensor_and_masked_decay():
  got, updates = _run(stable_adamw(LR, B1, B2, EPS, weight_decay=WD, mask=MASK), PARAMS,
                      GRADS)
  want, rms, steps = _reference(PARAMS, GRADS)
  # Step 2, w: g2 = 10 g1 gives v̂2 = g1² (β2 + 100) / (1 + β2) in every element, so
  # RMS_2 = sqrt(100 (1 + β2) / (β2 + 100)) = 1.40685...: the step is cut by that factor.
  assert rms[1]["w"] == pytest.approx(np.sqrt(100 * 1.999 / 100.999), rel=1e-9)
  assert rms[1]["w"] == pytest.approx(1.406850, rel=1e-6)
  assert all(r["b"] <= 1.0 + 1e-12 for r in rms) and rms[2]["w"] > 1.0
  # float32 against float64: 1 - β2^t at t = 1 loses 5 digits in float32 (as in
  # optax.adam, whose numerics these keep), 1e-5 of the first steps' size.
  for got_t, want_t, u, step in zip(got, want, updates, steps):
    for k in ("w", "b"):
      np.testing.assert_allclose(np.asarray(u[k]), step[k], rtol=2e-5)
      np.testing.assert_allclose(np.asarray(got_t[k]), want_t[k], atol=2e-6)
  # The clipped decay, step by step by hand for w[0, 0] at step 2 (RMS from above).
  g1, g2 = 0.01, 0.1
  first = 0.5 - LR * (g1 / (g1 + EPS) + WD * 0.5)  # step 1: m̂ = g, v̂ = g², RMS 1
  m2, v2 = (1 - B1) * (B1 * g1 + g2), (1 - B2) * (B2 * g1 ** 2 + g2 ** 2)
  adam2 = (m2 / (1 - B1 ** 2)) / (np.sqrt(v2 / (1 - B2 ** 2)) + EPS)
  second = first - LR / rms[1]["w"] * (adam2 + WD * first)
  np.testing.assert_allclose(float(got[1]["w"][0, 0]), second, rtol=2e-5)


def test_first_step_is_the_bias_corrected_sign():
  # Without bias correction the first step would be (1 - β1) / sqrt(1 - β2) = 3.16x larger.
  tx = stable_adamw(LR, B1, B2, EPS, weight_decay=0.0)
  updates, state = tx.update(GRADS[0], tx.init(PARAMS), PARAMS)
  # rtol: float32's 1 - β2 (test above).
  np.testing.assert_allclose(updates["b"], -LR * np.sign(G_B), rtol=2e-5)
  np.testing.assert_allclose(updates["w"], -LR * np.sign(G_W), rtol=2e-5)
  assert int(state[0].count) == 1


def test_equals_optax_adamw_while_no_tensor_is_clipped():
  grads = [{"w": jnp.asarray(G_W / s), "b": jnp.asarray(G_B / s)} for s in (1, 2, 3, 5)]
  _, rms, _ = _reference(PARAMS, grads)
  assert max(max(r.values()) for r in rms) <= 1.0 + 1e-12  # step 1's RMS is 1
  ours = _run(stable_adamw(LR, B1, B2, EPS, weight_decay=WD, mask=MASK), PARAMS, grads)
  adamw = _run(optax.adamw(LR, B1, B2, EPS, weight_decay=WD, mask=MASK), PARAMS, grads)
  for params_a, step_a, params_b, step_b in zip(*ours, *adamw):
    for k in ("w", "b"):
      np.testing.assert_allclose(step_a[k], step_b[k], rtol=1e-6)
      np.testing.assert_allclose(params_a[k], params_b[k], atol=1e-7)


def test_state_is_float32_for_bfloat16_params():
  params = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), PARAMS)
  grads = jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), GRADS[0])
  tx = stable_adamw(LR, weight_decay=WD, mask=MASK)
  updates, state = tx.update(grads, tx.init(params), params)
  assert {x.dtype for x in jax.tree_util.tree_leaves((state[0].mu, state[0].nu))} == {
      jnp.dtype(jnp.float32)}
  assert updates["w"].dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(updates["b"], np.float32), -LR * np.sign(G_B),
                             rtol=1e-2)


def test_stacked_leaf_clips_each_slice_as_its_own_tensor():
  # Slice 0 of the stack takes the clipped w gradients, slice 1 the unclipped b ones: the
  # same params as running the two tensors apart, not one RMS over the whole stack.
  stack = {"s": jnp.stack([PARAMS["w"][0], PARAMS["b"]])}
  grads = [{"s": jnp.stack([g["w"][0], g["b"]])} for g in GRADS]
  got, updates = _run(stable_adamw(LR, B1, B2, EPS, weight_decay=0.0, stacked={"s": True}),
                      stack, grads)
  _, rms, steps = _reference({"w": PARAMS["w"][0], "b": PARAMS["b"]},
                             [{"w": g["w"][0], "b": g["b"]} for g in GRADS], wd=0.0)
  assert rms[1]["w"] > 1.3 and rms[1]["b"] <= 1.0
  for u, step in zip(updates, steps):
    np.testing.assert_allclose(u["s"], np.stack([step["w"], step["b"]]), rtol=2e-5)
  whole, _ = _run(stable_adamw(LR, B1, B2, EPS, weight_decay=0.0), stack, grads)
  assert not np.allclose(whole[-1]["s"], got[-1]["s"], rtol=1e-4)


def _model_tree(scan: bool):
  k0, k1 = jnp.arange(4.0).reshape(2, 2) / 4, jnp.arange(4.0).reshape(2, 2) / 8 - 0.5
  if scan:
    enc = {"layers": {"mlp": {"kernel": jnp.stack([k0, k1]), "bias": jnp.ones((2, 2))}}}
  else:
    enc = {f"layers_{i}": {"mlp": {"kernel": k, "bias": jnp.ones(2)}} for i, k in
           enumerate((k0, k1))}
  return {"encoder": enc, "head": {"kernel": jnp.ones((2, 2))}}


def test_make_optimizer_builds_it_from_the_config_and_scanned_equals_unrolled():
  cfg = train_config(optimizer="stable_adamw", learning_rate=LR, b1=B1, b2=B2, eps=EPS,
                     weight_decay=WD, warmup_steps=0, schedule="constant", grad_clip_norm=0.0)
  tx, sched = optim.make_optimizer(cfg, 10)
  assert float(sched(3)) == pytest.approx(LR)
  scales = ((1.0, 0.1), (1.0, 3.0))  # layer 1's second gradient is 30x: only it is clipped
  results = {}
  for scan in (True, False):
    params = _model_tree(scan)
    grads = []
    for s0, s1 in scales:
      g = jax.tree_util.tree_map(lambda x: 0.01 * jnp.ones_like(x), params)
      if scan:
        g["encoder"]["layers"]["mlp"]["kernel"] = 0.01 * jnp.stack(
            [s0 * jnp.ones((2, 2)), s1 * jnp.ones((2, 2))])
      else:
        g["encoder"]["layers_0"]["mlp"]["kernel"] = 0.01 * s0 * jnp.ones((2, 2))
        g["encoder"]["layers_1"]["mlp"]["kernel"] = 0.01 * s1 * jnp.ones((2, 2))
      grads.append(g)
    results[scan] = _run(tx, params, grads)[0][-1]
  scanned, unrolled = results[True]["encoder"]["layers"]["mlp"], results[False]["encoder"]
  for i in range(2):
    np.testing.assert_allclose(scanned["kernel"][i], unrolled[f"layers_{i}"]["mlp"]["kernel"],
                               rtol=1e-6)
    np.testing.assert_allclose(scanned["bias"][i], unrolled[f"layers_{i}"]["mlp"]["bias"])
  # Biases are not decayed (decay_mask): two sign steps of lr from 1. Kernels are; layer 1's
  # second step is cut by RMS_2 = sqrt(900 (1 + β2) / (β2 + 900)).
  np.testing.assert_allclose(scanned["bias"], 1.0 - 2 * LR, rtol=2e-5)
  p = _reference({"k": _model_tree(False)["encoder"]["layers_1"]["mlp"]["kernel"]},
                 [{"k": 0.01 * s1 * np.ones((2, 2))} for _, s1 in scales], mask={"k": True})
  np.testing.assert_allclose(scanned["kernel"][1], p[0][-1]["k"], rtol=2e-5)
  assert p[1][1]["k"] == pytest.approx(np.sqrt(900 * 1.999 / 900.999), rel=1e-9)


def test_unknown_optimizer_lists_stable_adamw():
  with pytest.raises(ValueError, match=r"unknown train.optimizer 'stableadamw'.*stable_adamw"):
    optim.make_optimizer(train_config(optimizer="stableadamw"), 10)


# ---------------------------------------------------------------- warmup-stable-decay


def test_wsd_schedule_warmup_stable_and_one_minus_sqrt_decay():
  cfg = train_config(learning_rate=1e-3, warmup_steps=10, schedule="wsd", decay_fraction=0.2)
  sched = optim.learning_rate_schedule(cfg, total_steps=200)  # decay over steps 160..200
  got = [float(sched(s)) for s in (0, 5, 10, 100, 160, 170, 196, 200, 250)]
  want = [0.0, 5e-4, 1e-3, 1e-3, 1e-3,
          1e-3 * (1 - np.sqrt(10 / 40)),   # 0.5e-3
          1e-3 * (1 - np.sqrt(36 / 40)),   # 5.1317e-5
          0.0, 0.0]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-10)
  assert got[5] == pytest.approx(5e-4, rel=1e-5) and got[6] == pytest.approx(5.1317e-5, rel=1e-4)


def test_wsd_schedule_decays_to_its_floor_and_default_fraction():
  cfg = train_config(learning_rate=2.0, warmup_steps=0, schedule="wsd", min_lr_fraction=0.1)
  assert cfg.decay_fraction == 0.1  # the default: the last 10% of the steps
  sched = optim.learning_rate_schedule(cfg, total_steps=100)  # decay over steps 90..100
  # Step 0 is 0 as with every warmup here; at step 1 of a 0-step warmup, the peak.
  got = [float(sched(s)) for s in (1, 90, 92.5, 100, 120)]
  want = [2.0, 2.0, 2.0 * (0.1 + 0.9 * (1 - np.sqrt(0.25))), 0.2, 0.2]  # 92.5: 1.1
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_unknown_schedule_is_refused_and_a_misspelled_field_too():
  with pytest.raises(ValueError, match=r"unknown train.schedule 'wsdd'.*constant, wsd"):
    optim.learning_rate_schedule(train_config(schedule="wsdd"), 100)
  cfg = train_config()
  cfg.lock()
  cfg.decay_fraction = 0.2  # a field: settable in a locked config (--config.train.x=)
  with pytest.raises(AttributeError):
    cfg.decay_fracton = 0.2
