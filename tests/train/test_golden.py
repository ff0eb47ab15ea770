"""Whole training trajectories equal transformers' (tests/testdata/golden/, made by
scripts/make_golden_fixtures.py): from the same initial weights, on the same 30 batches of
our pipeline, with the same optimizer recipe, our real train_step (train/steps.py) and
optimizer (train/optim.py) give transformers' loss at every step to 1e-4 relative, its
gradient norm to 1e-3, and every parameter after 30 steps to 1e-3 (relative to the
tensor's largest entry). Gradient accumulation (4 x B/4) equals one step of B to 1e-6.
"""
import json
import os

import jax
import numpy as np
import pytest

from bert_jax import parallel
from bert_jax.train import loop, optim, steps
from tests.train import golden_cases

STEPS = golden_cases.STEPS


def _fixture(case):
  path = os.path.join(golden_cases.GOLDEN, f"{case}.npz")
  with open(path[:-len(".npz")] + ".json", encoding="utf-8") as f:
    meta = json.load(f)
  with np.load(path) as z:
    arrays = {k: z[k] for k in z.files}
  return meta, arrays


def _group(arrays, prefix):
  return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}


def run_ours(case, accum_steps=1, num_steps=STEPS, compiler_options=None):
  """Our trajectory on the fixture: (per-step metrics, final params as HF tensors, task).
  `compiler_options`: XLA options the step is compiled with (the suite's are conftest's)."""
  meta, arrays = _fixture(case)
  config = golden_cases.config_of(case)
  assert golden_cases.train_settings(config) == meta["train"], (
      "the config's optimizer recipe changed: regenerate with scripts/make_golden_fixtures.py")
  task = golden_cases.task_of(case, config)
  params = golden_cases.from_hf(case, task, _group(arrays, "init/"))
  tx, schedule = optim.make_optimizer(config.train, STEPS)
  config.train.grad_accum_steps = accum_steps
  batches = _group(arrays, "batch/")
  # The loop's own jitted step, its state shardings and batch placement, on a 2-device
  # data-parallel mesh (microbatches of 2 rows still split over it).
  mesh = parallel.create_mesh((2, 1, 1), jax.devices()[:2])
  with mesh:
    _, _, state_sh, _ = loop.abstract_state(task, tx, mesh, task.dummy_batch(
        golden_cases.BATCH, **task.phase_shapes({})), config.seed)
    state = jax.device_put(steps.create_state(params, tx, jax.random.key(config.seed)),
                           state_sh)
    step, _ = loop.jit_steps(task, tx, schedule, config.train, state_sh, mesh)
    batch_at = lambda i: parallel.host_to_global({k: v[i] for k, v in batches.items()}, mesh)
    if compiler_options:
      step = step.lower(state, batch_at(0)).compile(compiler_options)
    metrics = []
    for i in range(num_steps):
      state, m = step(state, batch_at(i))
      metrics.append(jax.device_get(m))
  return metrics, golden_cases.to_hf(case, task, state.params), arrays


@pytest.mark.parametrize("case", golden_cases.CASES)
def test_trajectory_equals_transformers(case):
  metrics, final, arrays = run_ours(case)
  loss = np.array([float(m["loss"]) for m in metrics])
  norm = np.array([float(m["grad_norm"]) for m in metrics])
  lr = np.array([float(m["learning_rate"]) for m in metrics])
  np.testing.assert_allclose(lr, arrays["learning_rate"], rtol=1e-6, atol=1e-12)
  np.testing.assert_allclose(loss, arrays["loss"], rtol=1e-4)
  np.testing.assert_allclose(norm, arrays["grad_norm"], rtol=1e-3)
  assert loss[-1] < loss[0] - 0.05   # the run learns: the comparison is not of a flat line
  ref, init = _group(arrays, "final/"), _group(arrays, "init/")
  assert sorted(final) == sorted(ref)
  moved = 0
  for name in ref:
    if name.endswith("attention.self.key.bias"):
      # Its exact gradient is 0 (a shift of every score of a query by q.b cancels in the
      # softmax), so both sides move it by rounding noise only, ~1e-10 here.
      np.testing.assert_allclose(final[name], ref[name], rtol=0, atol=1e-7, err_msg=name)
      moved += 1
      continue
    scale = np.max(np.abs(ref[name]))
    np.testing.assert_allclose(final[name], ref[name], rtol=0, atol=1e-3 * scale,
                               err_msg=name)
    # The update itself (final - init) agrees too, so a parameter that barely moved
    # (small learning rate, layer-wise decay) is not compared against its initial value.
    delta, ref_delta = final[name] - init[name], ref[name] - init[name]
    np.testing.assert_allclose(delta, ref_delta, rtol=0,
                               atol=1e-2 * np.max(np.abs(ref_delta)), err_msg=name)
    moved += bool(np.max(np.abs(ref_delta)) > 0)
  assert moved == len(ref)   # every tensor trained (none frozen or dropped from the tree)


def test_gradient_accumulation_4x_quarter_batch_equals_one_batch():
  """Pretraining (MLM weights differ row to row, so the normalization by the whole
  batch's weights matters) on the golden batches: 4 microbatches of 2 rows = 1 of 8.

  Compiled at XLA's default LLVM level (3), as a run is, not the suite's -O0
  (tests/conftest.py): 1e-6 is a few float32 ulps of the summation-order noise after
  three Adam steps, and -O0 rounds the sums differently (one FFN bias entry of 64 then
  differs by 1.02e-6 of its tensor's largest)."""
  opts = {"xla_backend_optimization_level": 3}
  one, final_one, _ = run_ours("pretraining", accum_steps=1, num_steps=3, compiler_options=opts)
  four, final_four, _ = run_ours("pretraining", accum_steps=4, num_steps=3,
                                 compiler_options=opts)
  for a, b in zip(one, four):
    for key in ("loss", "grad_norm", "mlm_accuracy", "nsp_accuracy"):
      np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-6, err_msg=key)
  for name in final_one:
    scale = np.max(np.abs(final_one[name]))
    if name.endswith("attention.self.key.bias"):  # rounding noise only (see above)
      scale = 1.0
    np.testing.assert_allclose(final_four[name], final_one[name], rtol=0,
                               atol=1e-6 * scale, err_msg=name)
