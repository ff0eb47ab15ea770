"""tasks/pretraining.py: a phase's own remat policy reaches the model its steps apply."""
import importlib.util
import os

import jax
import numpy as np

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
  train = lambda b: jax.make_jaxpr(lambda p: task.apply(p, b, rng, train=True))(params)
  assert _remats(train(long)) > 0 and _remats(train(short)) == 0
  # Remat changes what is recomputed, not what is computed.
  plain = PretrainingTask(tiny_config())
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
