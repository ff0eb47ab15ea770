"""Tiny translation configs (the trained numbers_workdir fixture: tests/conftest.py)."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]


def config_module():
  """configs/translation.py as a module (configs/ is not a package)."""
  spec = importlib.util.spec_from_file_location("translation_cfg",
                                                ROOT / "configs" / "translation.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def translation_config(arg="numbers", **train):
  c = config_module().get_config(arg)
  c.model.update(hidden_size=16, num_layers=1, num_decoder_layers=1, num_heads=2,
                 mlp_dim=32, max_len=32)
  c.gru.update(embed_dim=8, hidden_size=16, attention_units=8)
  c.data.update(vocab_size=120, max_source_length=12, max_target_length=20,
                max_eval_examples=12, num_test_examples=6)
  if c.data.pack_length:  # the paper's 256 needs max_len 256
    c.data.pack_length = 20
  c.train.update(batch_size=8, num_steps=2, log_every=1, eval_every=2, checkpoint_every=2,
                 warmup_steps=1, async_checkpoints=False, eval_steps=0)
  c.train.update(train)
  c.decode.eval_beam_size = 2
  return c

