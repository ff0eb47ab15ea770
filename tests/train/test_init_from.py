"""init_from: params from an HF directory or one of our checkpoints, nothing else."""
import os

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.checkpoint import manager as ckpt_lib
from bert_jax.runtime import parallel
from bert_jax.interop import hf_load
from bert_jax.tasks.pretraining import PretrainingTask
from bert_jax.train import loop, optim
from tests.train.conftest import random_batch, tiny_config

HF_TINY = os.path.join(os.path.dirname(__file__), "..", "testdata", "hf", "tiny_bert")


def _hf_shaped_config(scan: bool):
  cfg = tiny_config()
  cfg.model.update(dict(vocab_size=122, hidden_size=32, num_heads=4, mlp_dim=37, max_len=64,
                        scan_layers=scan))
  return cfg


@pytest.mark.parametrize("scan", [False, True])
def test_init_from_hf_directory(scan):
  task = PretrainingTask(_hf_shaped_config(scan))
  template = nn.unbox(jax.eval_shape(lambda: task.init(jax.random.key(0),
                                                       random_batch(0, vocab=122)))["params"])
  params = task.load_pretrained_params(HF_TINY, template)
  _, expect = hf_load.load_hf_bert(HF_TINY, scan_layers=scan)
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, expect)


def test_init_from_our_checkpoint_and_wrong_shape(tmp_path):
  cfg = tiny_config()
  task = PretrainingTask(cfg)
  tx, _ = optim.make_optimizer(cfg.train, 10)
  mesh = parallel.create_mesh((8, 1, 1))
  with mesh:
    state, _, abstract = loop.create_sharded_state(task, tx, mesh, random_batch(0), 3)
  ck = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints"), async_save=False)
  ck.save(5, state, loop._meta(cfg, task, 0))
  ck.close()
  # Scan layout on the receiving side: the unrolled checkpoint is converted.
  scan_cfg = tiny_config()
  scan_cfg.model.scan_layers = True
  scan_task = PretrainingTask(scan_cfg)
  template = nn.unbox(jax.eval_shape(lambda: scan_task.init(jax.random.key(0),
                                                            random_batch(0)))["params"])
  params = scan_task.load_pretrained_params(str(tmp_path), template)
  np.testing.assert_array_equal(
      params["bert"]["encoder"]["layers"]["mlp"]["wi"]["kernel"][1],
      jax.device_get(state.params["bert"]["encoder"]["layers_1"]["mlp"]["wi"]["kernel"]))
  wide = tiny_config()
  wide.model.hidden_size = 48
  wide_task = PretrainingTask(wide)
  wide_template = nn.unbox(jax.eval_shape(lambda: wide_task.init(jax.random.key(0),
                                                                 random_batch(0)))["params"])
  with pytest.raises(ckpt_lib.CheckpointMismatchError) as info:
    wide_task.load_pretrained_params(str(tmp_path), wide_template)
  # One line naming the size fields (it was a listing of every mis-shaped array).
  assert str(info.value) == (
      f"config.init_from {tmp_path} is a model of another size: model.hidden_size="
      f"{cfg.model.hidden_size} (this run: 48), model.head_dim={task.model_config.d_head} "
      f"(this run: {wide_task.model_config.d_head}). Set these --config.model.* (the "
      "vocabulary: data.vocab_path to its vocab) or start from a checkpoint of this run's size.")
