"""train/mfu.py: the MFU denominator (config, datasheet by device_kind, measured) and
chips.py's device_kind lookup (one table for both)."""
import pytest

from bert_jax.hardware import chips
from bert_jax.train import mfu


@pytest.mark.parametrize("kind, name, tflops", [
    # TPU kinds as libtpu reports them; bf16 peaks of Google Cloud's TPU pages.
    ("TPU v4", "v4", 275), ("TPU v5 lite", "v5e", 197), ("TPU v5e", "v5e", 197),
    ("TPU v5", "v5p", 459), ("TPU v5p", "v5p", 459), ("TPU v6 lite", "v6e", 918),
    # CUDA device names; dense BF16 = half the datasheets' sparsity figures.
    ("NVIDIA A100-SXM4-40GB", "a100-40gb", 312), ("NVIDIA A100-PCIE-40GB", "a100-40gb", 312),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb", 312), ("NVIDIA A100 80GB PCIe", "a100-80gb", 312),
    ("NVIDIA H100 80GB HBM3", "h100-sxm", 989.5), ("NVIDIA H100 PCIe", "h100-pcie", 756),
    ("NVIDIA H200", "h200", 989.5)])
def test_known_device_kinds_use_the_datasheet_peak(kind, name, tflops):
  chip = chips.chip_for_device_kind(kind)
  assert chip is chips.CHIPS[name] and chip.peak_bf16_flops == tflops * 1e12
  peak = mfu.resolve_peak(0.0, kind, measure=pytest.fail)  # no matmul is measured
  assert peak.flops == tflops * 1e12 and peak.source == "datasheet"
  assert peak.describe().startswith(f"MFU peak: {tflops:.1f} TFLOP/s per device, datasheet")
  assert repr(kind) in peak.describe()


@pytest.mark.parametrize("kind", ["cpu", "NVIDIA H100 NVL", "NVIDIA GeForce RTX 4090",
                                  "TPU v3", "TPU v7"])
def test_unknown_device_kinds_fall_back_to_the_measured_matmul_and_say_so(kind):
  peak = mfu.resolve_peak(0.0, kind, dtype="float32", measure=lambda dtype: 96.1e9)
  assert peak.source == "measured" and peak.flops == 96.1e9
  assert peak.describe() == (f"MFU peak: 96.1 GFLOP/s per device, measured float32 matmul "
                             f"(no datasheet figure for device_kind {kind!r})")


def test_the_config_override_wins_and_is_named():
  peak = mfu.resolve_peak(123e12, "TPU v4", measure=pytest.fail)
  assert peak.flops == 123e12 and peak.source == "config"
  assert peak.describe() == ("MFU peak: 123.0 TFLOP/s per device, config "
                             "train.peak_flops_per_device")


def test_this_machine_cpu_is_measured():
  """The real lookup on this (CPU) backend: no datasheet entry, a measured peak > 0."""
  peak = mfu.resolve_peak(0.0, measure=lambda dtype: 1e9)
  assert peak.source == "measured" and "device_kind 'cpu'" in peak.describe()


def test_the_measured_peak_is_of_the_products_the_run_makes():
  """A matmul_dtype run's MFU is over that dtype's matmul (float32 accumulation), not
  float32's: on an AMX CPU bf16 products run 5x faster, and the fine-tuning log printed
  'mfu 82%' against the float32 peak. bf16 compute on CPU keeps the float32 peak."""
  from bert_jax.layers.config import TransformerConfig  # pylint: disable=g-import-not-at-top
  cfg = TransformerConfig(vocab_size=8, hidden_size=8, num_layers=1, num_heads=1)
  assert mfu.peak_dtype(cfg, "cpu") == "float32"
  assert mfu.peak_dtype(cfg.replace(matmul_dtype="bfloat16"), "cpu") == "bfloat16"
  assert mfu.peak_dtype(cfg.replace(dtype="bfloat16"), "cpu") == "float32"
  assert mfu.peak_dtype(cfg.replace(dtype="bfloat16"), "gpu") == "bfloat16"
  assert mfu.peak_dtype(object(), "cpu") == "float32"  # a model config without these fields


def test_mfu_is_achieved_over_peak():
  # 1e12 FLOPs per step in 0.5 s on 4 devices of 1e12 FLOP/s: 2e12 / 4e12.
  assert mfu.mfu(1e12, 0.5, 4, 1e12) == pytest.approx(0.5)


def test_topologies_stay_tpu_only():
  with pytest.raises(ValueError, match=r"GEN in \['v4', 'v5e', 'v5p', 'v6e'\]"):
    chips.parse_topology("a100-80gb:2x2")
