"""tasks/pretraining.py: a phase's own remat policy and RoPE theta reach the models its
steps and evals apply."""
import importlib.util
import os

import jax
import numpy as np
import pytest

from bert_jax import configs
from bert_jax.tasks.pretraining import PretrainingTask
from tests.train.conftest import random_batch, tiny_config


def _remats(jaxpr) -> int:
  return str(jaxpr).count("checkpoint[") + str(jaxpr).count("remat")


def test_a_phase_remat_policy_applies_to_its_length_only():
  config = tiny_config()
  config.train.phases = (dict(fraction=0.5, max_seq_length=8, max_predictions_per_seq=2),
                         dict(fraction=0.5, max_seq_length=16, max_predictions_per_seq=4,
                              remat_policy="full"))
  task = PretrainingTask(config)
  assert task.model_config.remat_policy == "none"
  assert {k: m.config.remat_policy for k, m in task.phase_models.items()} == {16: "full"}
  long = random_batch(0)                                             # 16 tokens
  short = {k: (v[:, :8] if k in ("input_ids", "input_mask", "segment_ids") else v)
           for k, v in random_batch(1).items()}
  short["masked_lm_positions"] = np.minimum(short["masked_lm_positions"], 7)
  # Jitted: one compile each instead of eager op-by-op dispatch of the whole model.
  params = jax.jit(lambda k: task.init(k, long))(jax.random.key(0))["params"]
  rng = jax.random.key(1)
  plain = PretrainingTask(tiny_config())
  train = lambda t, b: jax.make_jaxpr(lambda p: t.apply(p, b, rng, train=True))(params)
  # Against the same model with no phase policy: the GELU's own checkpoint (layers/
  # blocks.py) is in both.
  assert _remats(train(task, long)) > _remats(train(plain, long))
  assert _remats(train(task, short)) == _remats(train(plain, short))
  # Remat changes what is recomputed, not what is computed.
  logits = [jax.jit(lambda p, t=t: t.apply(p, long, rng, True)["mlm_logits"])(params)
            for t in (task, plain)]
  np.testing.assert_allclose(logits[0], logits[1], atol=1e-6)


def test_bert_configs_set_a_remat_policy_per_phase():
  got = {}
  for name in ("bert_base", "bert_large"):
    path = os.path.join(os.path.dirname(configs.__file__), name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    task = PretrainingTask(module.get_config())
    got[name] = {k: m.config.remat_policy for k, m in task.phase_models.items()}
    assert got[name] == {128: module.S128_REMAT, 512: module.S512_REMAT}
    s512 = module.get_config("s512") if name == "bert_large" else None
    if s512 is not None:  # one phase: the model's policy, which a sweep may override
      assert s512.model.remat_policy == module.S512_REMAT
      assert "remat_policy" not in dict(s512.train.phases[0])


def _modernbert_config(*phases):
  from bert_jax.train.defaults import model_config  # pylint: disable=g-import-not-at-top
  config = tiny_config()
  config.model = model_config("modernbert/tiny", vocab_size=64, max_len=128, num_layers=2,
                              hidden_size=32, num_heads=2, mlp_dim=64, local_window=32)
  config.data.mode = "mlm_packed"
  config.train.phases = phases
  return config


def test_a_phase_rotary_base_is_the_theta_of_its_steps_and_evals():
  """ModernBERT's context extension: 64 tokens at global theta 10,000, 128 at 160,000;
  each length's outputs (train and eval) are those of a model built with its theta."""
  from bert_jax.models.registry import pretraining_model  # pylint: disable=g-import-not-at-top
  task = PretrainingTask(_modernbert_config(
      dict(fraction=0.5, max_seq_length=64, max_predictions_per_seq=4, rotary_base=1e4),
      dict(fraction=0.5, max_seq_length=128, max_predictions_per_seq=4, rotary_base=1.6e5)))
  batches = {n: random_batch(n, length=n, preds=4) for n in (64, 128)}
  params = jax.jit(lambda k: task.init(k, batches[64]))(jax.random.key(0))["params"]
  # Sharper attention than at init (where it is near uniform, whatever the rotation), so
  # the two thetas' outputs differ well beyond rounding.
  params = jax.tree_util.tree_map_with_path(
      lambda path, x: x * 30 if "Wqkv" in jax.tree_util.keystr(path) else x, params)
  rng = jax.random.key(1)
  for n, theta in ((64, 1e4), (128, 1.6e5)):
    for train in (True, False):
      got = jax.jit(lambda p, b: task.apply(p, b, rng, train)["mlm_logits"])(params, batches[n])
      logits = {}
      for t in (1e4, 1.6e5):
        cfg = task.model_config.replace(rotary_base=t, deterministic=not train)
        model = pretraining_model(cfg, nsp=False)
        logits[t] = jax.jit(lambda p, b, m=model: m.apply(
            {"params": p}, **task._inputs(b), rngs={"dropout": rng})["mlm_logits"])(
                params, batches[n])
      np.testing.assert_allclose(got, logits[theta], atol=1e-6)
      other = logits[1.6e5 if theta == 1e4 else 1e4]
      assert np.abs(np.asarray(got) - np.asarray(other)).max() > 1e-3, (n, train)


@pytest.mark.parametrize("phases,message", [
    ((dict(fraction=1.0, rotary_bsae=1e4),),
     r"^train.phases\[0\] has unknown key\(s\) \['rotary_bsae'\]; allowed: fraction, "
     r"batch_size, max_seq_length, max_predictions_per_seq, remat_policy, rotary_base\.$"),
    ((dict(fraction=0.5, max_seq_length=64, batch_size=8),
      dict(fraction=0.5, max_seq_length=64, rotary_base=1.6e5)),
     r"^train.phases\[1\] sets \{'rotary_base': 160000.0\} but train.phases\[0\] at the "
     r"same length 64 sets none: phases of one length share one model\.$"),
])
def test_phase_keys_and_a_length_shared_by_two_models_are_one_line_errors(phases, message):
  with pytest.raises(ValueError, match=message):
    PretrainingTask(_modernbert_config(*phases))


def test_a_rotary_base_on_learned_positions_is_refused():
  config = tiny_config()
  config.train.phases = (dict(fraction=1.0, rotary_base=1e4),)
  with pytest.raises(ValueError, match=r"^train.phases\[0\].rotary_base is for rotary "
                     r"positions; model.position='learned'\.$"):
    PretrainingTask(config)
