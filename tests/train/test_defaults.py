"""train/defaults.py: the per-platform model fields (None) and what fixes them."""
import importlib.util
import json
import os

import pytest

from bert_jax import configs
from bert_jax.models.variants import get_model_config
from bert_jax.train import defaults


def _exec(name):
  """get_config() of configs/<name>.py."""
  path = os.path.join(os.path.dirname(configs.__file__), name + ".py")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


@pytest.mark.parametrize("platform,layers,scan", [
    ("cpu", 2, False), ("cpu", 12, False), ("cpu", 24, True),
    ("tpu", 2, False), ("tpu", 12, False), ("tpu", 24, True), ("gpu", 12, False),
    ("gpu", 24, True)])
def test_platform_defaults(platform, layers, scan):
  assert defaults.default_for("scan_layers", layers, platform) is scan
  cfg = get_model_config("bert/tiny", num_layers=layers, scan_layers=None)
  assert defaults.for_platform(cfg, platform).scan_layers is scan
  # Explicit values are kept.
  assert defaults.for_platform(cfg.replace(scan_layers=not scan), platform).scan_layers is (
      not scan)


def test_pretraining_configs_leave_the_layout_to_the_platform():
  base, large = _exec("bert_base"), _exec("bert_large")
  assert base.model.scan_layers is None and large.model.scan_layers is None
  # On this CPU host: BERT-base (12 layers) unrolls, BERT-large (24) scans.
  assert defaults.transformer_config(base).scan_layers is False
  assert defaults.transformer_config(large).scan_layers is True
  # For a TPU target (bert_jax.aot) the same, and the config then says so.
  defaults.resolve_platform(base, "tpu")
  assert base.model.scan_layers is False
  # An explicit value is kept whatever the platform; the field still takes bools only.
  large.model.scan_layers = False
  defaults.resolve_platform(large, "tpu")
  assert large.model.scan_layers is False
  with pytest.raises(TypeError):
    large.model.scan_layers = "auto"


def _fake_checkpoint(workdir, step, scan, **model_config):
  meta = workdir / "checkpoints" / str(step) / "meta"
  meta.mkdir(parents=True)
  (meta / "metadata").write_text(json.dumps({"model_config": dict(model_config,
                                                                  scan_layers=scan)}))


def _resolved_scan(platform, workdir):
  config = _exec("bert_base")
  defaults.resolve_platform(config, platform, str(workdir))
  return config.model.scan_layers


def test_a_resumed_run_keeps_the_layout_of_its_checkpoints(tmp_path):
  # Started on an accelerator (scanned checkpoints), resumed on CPU: it keeps scanning,
  # since the unrolled state would not match the saved one.
  _fake_checkpoint(tmp_path, 100, True)
  _fake_checkpoint(tmp_path, 200, True)
  assert _resolved_scan("cpu", tmp_path) is True
  assert _resolved_scan("cpu", tmp_path / "fresh") is False  # no checkpoint: the platform's
  _fake_checkpoint(tmp_path, 300, False)  # the newest checkpoint is the one that counts
  assert _resolved_scan("tpu", tmp_path) is False


def _resolved_rows(workdir, mesh_shape, vocab_multiple=0):
  config = defaults.bert_pretraining_config("bert/base")  # 30,522 tokens, multiple 0
  config.mesh_shape, config.model.vocab_multiple = mesh_shape, vocab_multiple
  defaults.resolve_platform(config, "cpu", str(workdir))
  return config.model.vocab_multiple, defaults.transformer_config(config, "cpu").padded_vocab


def test_a_resumed_run_keeps_the_vocabulary_padding_of_its_checkpoints(tmp_path):
  # Saved at tensor 8 (128 x 8 = 1,024: 30,720 rows), resumed at tensor 4: the automatic
  # padding would be 512 (also 30,720 rows here) and, for the step saved at tensor 1 below,
  # 30,592 rows against 30,720 saved: a checkpoint the model could not restore.
  _fake_checkpoint(tmp_path, 100, False, vocab_multiple=128, vocab_size=30522)
  assert _resolved_rows(tmp_path, (2, 1, 4)) == (128, 30592)        # not 512's 30,720
  assert _resolved_rows(tmp_path / "fresh", (2, 1, 4)) == (0, 30720)  # no checkpoint
  # The newest checkpoint counts; a damaged meta falls back to the one before it.
  _fake_checkpoint(tmp_path, 200, False, vocab_multiple=1024, vocab_size=30522)
  assert _resolved_rows(tmp_path, (1, 1, 2)) == (1024, 30720)
  (tmp_path / "checkpoints" / "300" / "meta").mkdir(parents=True)
  (tmp_path / "checkpoints" / "300" / "meta" / "metadata").write_text("{damaged")
  assert _resolved_rows(tmp_path, (1, 1, 2)) == (1024, 30720)
  # Kept only where it still splits over the tensor axis (30,720 / 3 does, 30,592 / 3 does
  # not: restore then names the padding to set), only for the same vocabulary, and an
  # explicit vocab_multiple is the user's.
  assert _resolved_rows(tmp_path, (1, 1, 3)) == (1024, 30720)
  _fake_checkpoint(tmp_path, 400, False, vocab_multiple=128, vocab_size=30522)
  assert _resolved_rows(tmp_path, (1, 1, 3)) == (0, 30720)
  assert _resolved_rows(tmp_path, (1, 1, 1), vocab_multiple=8) == (8, 30528)
  _fake_checkpoint(tmp_path, 500, False, vocab_multiple=1024, vocab_size=8192)
  assert _resolved_rows(tmp_path, (2, 1, 4)) == (0, 30720)
