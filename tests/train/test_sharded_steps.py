"""Unit tests of the sharded train step on 8 fake CPU devices."""
import collections
import functools
import re

import jax
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax.runtime import parallel
from bert_jax.tasks.pretraining import PretrainingTask
from bert_jax.train import optim, steps
from bert_jax.train.loop import create_sharded_state, jit_steps
from tests import tolerance
from tests.train.conftest import random_batch, tiny_config


def run_steps(config, mesh_shape, batches, devices=None, accum=1):
  """Creates the sharded state on the mesh and runs the jitted train step on each batch."""
  mesh = parallel.create_mesh(mesh_shape, devices)
  task = PretrainingTask(config)
  tx, schedule = optim.make_optimizer(config.train, config.train.num_steps)
  config.train.grad_accum_steps = accum
  with mesh:
    state, sh, _ = create_sharded_state(task, tx, mesh, batches[0], seed=0)
    fn, _ = jit_steps(task, tx, schedule, config.train, sh, mesh)   # what the loop runs
    metrics = []
    for b in batches:
      gb = {k: jax.device_put(v, parallel.batch_sharding(mesh, v.ndim)) for k, v in b.items()}
      state, m = fn(state, gb)
      metrics.append(jax.device_get(m))
  return state, metrics, sh, mesh


def assert_same_steps(metrics, state, ref_metrics, ref_state, config, batches):
  """Two runs of the same steps on the same batches agree within what float32 rounding
  can make of them (tests/tolerance.py): the losses, the gradient norm, the accuracy's
  hit count, the parameters and Adam's moments."""
  m, t = config.model, config.train
  batch = len(batches[0]["input_ids"])
  preds = config.data.max_predictions_per_seq
  vocab = 512  # the largest padded vocabulary of these meshes (128 x tensor 4)
  chain = tolerance.bert_step_chain(hidden=m.hidden_size, mlp=m.mlp_dim, heads=m.num_heads,
                                    layers=2,  # bert/tiny
                                    seq=config.data.max_seq_length, vocab=vocab,
                                    batch=batch, preds=preds)
  loss_rtol = tolerance.sum_rtol(vocab + 2 + batch * preds + batch, tolerance.U32)
  grad_rtol = tolerance.grad_rtol(chain)
  for got, ref, b in zip(metrics, ref_metrics, batches):
    for k in ("loss", "mlm_loss", "nsp_loss"):
      np.testing.assert_allclose(got[k], ref[k], rtol=loss_rtol, err_msg=k)
    np.testing.assert_allclose(got["grad_norm"], ref["grad_norm"], rtol=grad_rtol,
                               err_msg="grad_norm")
    # A hit count (exact); one prediction may flip on an argmax tied within rounding.
    np.testing.assert_allclose(got["mlm_accuracy"], ref["mlm_accuracy"], rtol=0,
                               atol=1 / b["masked_lm_weights"].sum(), err_msg="mlm_accuracy")
  lrs = [float(r["learning_rate"]) for r in ref_metrics]
  atol = tolerance.adam_param_atol(lrs, 2 * grad_rtol, t.b2)  # clipped gradients: x2
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=atol),
                         state.params, ref_state.params)
  is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)
  (adam,) = [x for x in jax.tree_util.tree_leaves(state.opt_state, is_leaf=is_adam)
             if is_adam(x)]
  (ref_adam,) = [x for x in jax.tree_util.tree_leaves(ref_state.opt_state, is_leaf=is_adam)
                 if is_adam(x)]
  assert int(adam.count) == int(ref_adam.count) == len(ref_metrics)

  largest_nu = max(float(np.max(x)) for x in jax.tree_util.tree_leaves(ref_adam.nu))

  def moments(path, mu, nu, ref_mu, ref_nu):
    name = jax.tree_util.keystr(path)
    scale = ref_nu
    if "['key']['bias']" in name:
      # Exact gradient 0 (a shift of every score of a query cancels in the softmax): both
      # moments are rounding noise, held to the bound of the model's largest entry.
      scale = np.full_like(ref_nu, largest_nu)
    mu_atol, nu_atol = tolerance.adam_moment_atol(scale, len(ref_metrics), 2 * grad_rtol,
                                                  t.b1, t.b2)
    assert np.all(np.abs(mu - ref_mu) <= mu_atol), (name, np.max(np.abs(mu - ref_mu)))
    assert np.all(np.abs(nu - ref_nu) <= nu_atol), (name, np.max(np.abs(nu - ref_nu)))
  jax.tree_util.tree_map_with_path(moments, adam.mu, adam.nu, ref_adam.mu, ref_adam.nu)


@pytest.fixture(scope="module")
def single_device_run():
  batches = [random_batch(i) for i in range(2)]
  state, metrics, _, _ = run_steps(tiny_config(), (1, 1, 1), batches, jax.devices()[:1])
  return batches, jax.device_get(state), metrics


@pytest.mark.parametrize("mesh_shape", [(8, 1, 1), (2, 2, 2), (1, 2, 4)])
def test_sharded_step_equals_single_device(single_device_run, mesh_shape):
  batches, ref_state, ref_metrics = single_device_run
  config = tiny_config()
  state, metrics, sh, mesh = run_steps(config, mesh_shape, batches)
  assert_same_steps(metrics, jax.device_get(state), ref_metrics, ref_state, config,
                    batches)
  # The declared shardings are the ones the arrays carry.
  qk = state.params["bert"]["encoder"]["layers_0"]["attention"]["query"]["kernel"]
  emb = state.params["bert"]["embeddings"]["token_embedder"]["embedding"]
  wi = state.params["bert"]["encoder"]["layers_0"]["mlp"]["wi"]["kernel"]
  assert qk.sharding == NamedSharding(mesh, P("fsdp", "tensor", None))
  assert emb.sharding == NamedSharding(mesh, P("tensor", "fsdp"))
  assert wi.sharding == NamedSharding(mesh, P("fsdp", "tensor"))
  mu = state.opt_state[1][0].mu["bert"]["encoder"]["layers_0"]["mlp"]["wi"]["kernel"]
  assert mu.sharding == wi.sharding  # Adam moments sharded like their params
  jax.tree_util.tree_map(lambda a, s: _assert_sharding(a, s), state, sh)


def _assert_sharding(array, sharding):
  assert array.sharding.is_equivalent_to(sharding, array.ndim)


def test_gradient_accumulation_equals_one_big_batch():
  """On a sharded mesh. The first step's learning rate is 0 (warmup): the parameters stay,
  and Adam's first moment, (1 - b1) g, compares the gradients themselves."""
  big = random_batch(7, batch=16)
  cfg = tiny_config()
  state_a, m_a, _, _ = run_steps(cfg, (2, 2, 2), [big], accum=1)
  state_b, m_b, _, _ = run_steps(cfg, (2, 2, 2), [big], accum=4)
  assert_same_steps(m_b, jax.device_get(state_b), m_a, jax.device_get(state_a), cfg,
                    [big])


def test_nonfinite_step_leaves_state_untouched():
  """Here a cond; the same step lowered for cuda has a select instead (no conditional,
  whose predicate XLA:GPU reads on the host; on TPU too: steps.guarded_update)."""
  cfg = tiny_config(learning_rate=1e-3)
  batch = random_batch(3)
  mesh = parallel.create_mesh((8, 1, 1))
  task = PretrainingTask(cfg)
  tx, schedule = optim.make_optimizer(cfg.train, 10)
  with mesh:
    state, sh, _ = create_sharded_state(task, tx, mesh, batch, seed=0)
    before = jax.device_get(state.params)
    poisoned = jax.tree_util.tree_map(lambda x: x, state)
    emb = poisoned.params["bert"]["embeddings"]["token_embedder"]["embedding"]
    poisoned.params["bert"]["embeddings"]["token_embedder"]["embedding"] = emb.at[0, 0].set(
        np.nan)
    step = functools.partial(steps.train_step, task=task, tx=tx, schedule=schedule)
    fn = jax.jit(step)
    batch = dict(batch, input_ids=np.zeros_like(batch["input_ids"]))  # uses the NaN row
    new, m = fn(poisoned, batch)
    on_cpu = fn.trace(poisoned, batch).lower().as_text()
    on_gpu = jax.jit(parallel.with_trace_platform("gpu", step)).trace(poisoned, batch).lower(
        lowering_platforms=("cuda",)).as_text()
  assert "stablehlo.case" in on_cpu and "stablehlo.case" not in on_gpu
  assert m["finite"] == 0.0
  assert int(new.step) == 1
  after = jax.tree_util.tree_map(np.array, jax.device_get(new.params))
  # Every param except the poisoned entry is bit-identical: nothing was applied.
  after["bert"]["embeddings"]["token_embedder"]["embedding"][0, 0] = before[
      "bert"]["embeddings"]["token_embedder"]["embedding"][0, 0]
  jax.tree_util.tree_map(np.testing.assert_array_equal, after, before)


@pytest.mark.parametrize("platform", ["cpu", "gpu", "tpu"])
def test_guarded_update_changes_nothing_when_not_finite(platform):
  """Both of guarded_update's forms (cond on CPU; select on GPU and TPU), run here: the old tree, bit for
  bit, when not finite, and the update when finite."""
  old = {"w": np.arange(4.0, dtype=np.float32), "count": np.int32(3)}
  update = lambda: {"w": old["w"] * np.nan, "count": old["count"] + 1}
  fn = jax.jit(parallel.with_trace_platform(
      platform, lambda ok: steps.guarded_update(ok, update, old)))
  kept, applied = jax.device_get(fn(False)), jax.device_get(fn(True))
  np.testing.assert_array_equal(kept["w"], old["w"])
  assert kept["count"] == 3 and applied["count"] == 4 and np.isnan(applied["w"]).all()


def test_float16_training_is_refused_naming_bfloat16(tmp_path):
  """No loss scaling: float16 is refused before anything runs or is written."""
  from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
  cfg = tiny_config()
  cfg.model.dtype = "float16"
  with pytest.raises(ValueError, match=r"^model.dtype=float16: .*model.dtype=bfloat16"):
    loop.train_and_evaluate(cfg, str(tmp_path / "run"), PretrainingTask(cfg))
  assert not (tmp_path / "run").exists()
  steps.check_precision(PretrainingTask(tiny_config()).model_config)  # float32: fine


def test_weight_decay_mask_skips_layernorm_and_biases():
  cfg = tiny_config()
  task = PretrainingTask(cfg)
  params = jax.eval_shape(lambda: task.init(jax.random.key(0), random_batch(0)))["params"]
  import flax.linen as nn
  mask = optim.decay_mask(nn.unbox(params))
  assert mask["bert"]["encoder"]["layers_0"]["attention"]["query"]["kernel"] is True
  assert mask["bert"]["encoder"]["layers_0"]["attention"]["query"]["bias"] is False
  assert mask["bert"]["embeddings"]["layer_norm"]["scale"] is False
  assert mask["mlm_head"]["bias"] is False
  assert mask["bert"]["embeddings"]["token_embedder"]["embedding"] is True


def test_schedules():
  cfg = tiny_config(learning_rate=1.0, warmup_steps=10).train
  lin = optim.learning_rate_schedule(cfg, 110)
  assert float(lin(0)) == 0.0 and float(lin(5)) == pytest.approx(0.5)
  assert float(lin(10)) == pytest.approx(1.0) and float(lin(60)) == pytest.approx(0.5)
  assert float(lin(110)) == pytest.approx(0.0, abs=1e-6)
  cfg.schedule = "inverse_sqrt"
  inv = optim.learning_rate_schedule(cfg, 110)
  assert float(inv(5)) == pytest.approx(0.5) and float(inv(40)) == pytest.approx(0.5)


def test_the_loops_steps_pin_block_activations_to_the_batch_axes():
  """parallel.constrain inside the blocks applies in the loop's jitted steps (traced on the
  mesh): block inputs/outputs [batch, len, embed] over (data, fsdp), the FFN's hidden
  [batch, len, mlp] also over tensor. Traced without the mesh they are no-ops, and the
  partitioner may keep fsdp activations on `data` alone (BERT-large S128, 2048 rows on
  v5e:4x4: 19.1 GiB per chip without them, 9.45 GiB with)."""
  config, batch = tiny_config(), random_batch(0)
  mesh = parallel.create_mesh((1, 4, 2))
  task = PretrainingTask(config)
  tx, schedule = optim.make_optimizer(config.train, 10)
  state, sh, abstract = create_sharded_state(task, tx, mesh, batch, seed=0)
  gb = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=parallel.batch_sharding(mesh, v.ndim))
        for k, v in batch.items()}

  def pins(fn):
    text = fn.lower(abstract, gb).as_text()
    return collections.Counter(re.findall(r"sdy\.sharding_constraint %\S+ <@\w+, (\[[^>]*\])>",
                                          text))
  p_train, _ = jit_steps(task, tx, schedule, config.train, sh, mesh)
  got = pins(p_train)
  layers = task.model_config.num_layers
  # Each layer: block input and output, forward and backward (the transpose keeps the pin),
  # positions over tensor between blocks (sequence parallelism).
  assert got['[{"data", "fsdp"}, {"tensor"}, {}]'] == 4 * layers, got
  # The FFN's hidden [batch, len, mlp] per layer, and the MLM logits [batch, P, vocab]
  # (vocabulary over tensor, as the table's rows), forward and backward.
  assert got['[{"data", "fsdp"}, {}, {"tensor"}]'] == 2 * layers + 2, got
  # Attention: queries, keys, values and the heads' output [batch, len, heads, d], heads
  # over tensor, forward and backward.
  assert got['[{"data", "fsdp"}, {}, {"tensor"}, {}]'] == 8 * layers, got
  # The MLM head's input and normalized hidden [batch, P, hidden]: rows over the data axes.
  assert got['[{"data", "fsdp"}, {}, {}]'] == 4, got
  # The step as the loop jitted it before: under `with mesh:` only, the pins were no-ops.
  bare = jax.jit(functools.partial(steps.train_step, task=task, tx=tx, schedule=schedule))
  with mesh:
    assert not pins(bare)['[{"data", "fsdp"}, {"tensor"}, {}]']


def test_a_vocabulary_that_does_not_split_over_tensor_names_the_field_and_a_fix():
  # BERT's 30522 rows over tensor 4 is the real case; 66 over 4 the same, tiny.
  config = tiny_config()
  config.model.vocab_size = 66
  task = PretrainingTask(config)
  tx, _ = optim.make_optimizer(config.train, 10)
  with pytest.raises(ValueError, match=re.escape(
      "['token_embedder']['embedding'] of shape (66, 32) (logical axes ('vocab', 'embed')): "
      "dimension 0 ('vocab', 66) does not split over mesh axes ('tensor',) (4 ways; "
      "config.mesh_shape resolved to (2, 1, 4)). Pad the vocabulary: "
      "config.model.vocab_multiple=0 (128 x tensor, the configs' default) or a multiple of "
      "4 (the padding rows are never an id), or change config.mesh_shape.")):
    create_sharded_state(task, tx, parallel.create_mesh((-1, 1, 4)), random_batch(0, vocab=66),
                         seed=0)
  config.model.vocab_multiple = 0   # the suggested padding builds: 128 x tensor rows
  config.mesh_shape = (2, 1, 4)
  state, _, _ = create_sharded_state(PretrainingTask(config), tx,
                                     parallel.create_mesh((2, 1, 4)),
                                     random_batch(0, vocab=66), seed=0)
  assert state.params["bert"]["embeddings"]["token_embedder"]["embedding"].shape == (512, 32)
