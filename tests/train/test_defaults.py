"""train/defaults.py: scan_layers per platform (None) and what fixes it."""
import json

import pytest

from bert_jax import configs
from bert_jax.train import defaults


def _exec(name):
  """get_config() of configs/<name>.py."""
  import importlib.util
  import os
  path = os.path.join(os.path.dirname(configs.__file__), name + ".py")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


@pytest.mark.parametrize("platform,layers,want", [
    ("cpu", 2, False), ("cpu", 12, False), ("cpu", 24, True),
    ("tpu", 2, True), ("tpu", 12, True), ("gpu", 12, True)])
def test_default_scan_layers(platform, layers, want):
  assert defaults.default_scan_layers(layers, platform) is want


def test_pretraining_configs_leave_scan_to_the_platform():
  base, large = _exec("bert_base"), _exec("bert_large")
  assert base.model.scan_layers is None and large.model.scan_layers is None
  # On this CPU host: BERT-base (12 layers) unrolls, BERT-large (24) scans.
  assert defaults.transformer_config(base).scan_layers is False
  assert defaults.transformer_config(large).scan_layers is True
  # For a TPU target (bert_jax.aot) both scan, and the config then says so.
  assert defaults.resolve_scan_layers(base, "tpu") is True and base.model.scan_layers is True
  # An explicit value is kept whatever the platform; the field still takes bools only.
  large.model.scan_layers = False
  assert defaults.resolve_scan_layers(large, "tpu") is False
  with pytest.raises(TypeError):
    large.model.scan_layers = "auto"


def _fake_checkpoint(workdir, step, scan):
  meta = workdir / "checkpoints" / str(step) / "meta"
  meta.mkdir(parents=True)
  (meta / "metadata").write_text(json.dumps({"model_config": {"scan_layers": scan}}))


def test_a_resumed_run_keeps_the_layout_of_its_checkpoints(tmp_path):
  # Started on an accelerator (scanned checkpoints), resumed on CPU: it keeps scanning,
  # since the unrolled state would not match the saved one.
  _fake_checkpoint(tmp_path, 100, True)
  _fake_checkpoint(tmp_path, 200, True)
  config = _exec("bert_base")
  assert defaults.resolve_scan_layers(config, "cpu", str(tmp_path)) is True
  # No checkpoint yet: the platform decides.
  config = _exec("bert_base")
  assert defaults.resolve_scan_layers(config, "cpu", str(tmp_path / "fresh")) is False
  # The newest checkpoint is the one that counts.
  _fake_checkpoint(tmp_path, 300, False)
  config = _exec("bert_base")
  assert defaults.resolve_scan_layers(config, "tpu", str(tmp_path)) is False
