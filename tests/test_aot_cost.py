"""The TPU compiler's estimate in bert_jax.aot's report (bert_jax/aot/cost.py)."""
import json

import pytest

from bert_jax.aot import compile as compile_lib, cost as cost_lib, report as report_lib
from bert_jax.aot.check import check
from bert_jax.hardware import chips
from tests.test_aot import _config, _pod_matmul_precision, _xla_flags_restored  # noqa: F401


def test_model_flops_is_palms_formula():
  # BERT-base S128, 256 rows: 6 N T + 12 L S d T (Chowdhery et al. 2022, appendix B).
  tokens = 256 * 128
  assert cost_lib.model_flops(110_000_000, 12, 128, 768, tokens) == (
      6 * 110_000_000 * tokens + 12 * 12 * 128 * 768 * tokens)
  assert cost_lib.model_flops(110_000_000, 12, 128, 768, tokens, train=False) == pytest.approx(
      (6 * 110_000_000 * tokens + 12 * 12 * 128 * 768 * tokens) / 3)


def test_estimate_reads_mfu_and_tokens_from_the_compilers_seconds():
  raw = {"flops": 6e12, "bytes": 6.1e10, "optimal_seconds": 0.09, "transcendentals": 0.0}
  est = cost_lib.estimate(raw, flops=2.2e13, tokens=32768, num_chips=4, peak_flops=197e12)
  assert est["flops_per_chip"] == 6e12 and est["bytes_per_chip"] == 6.1e10
  assert est["est_mfu"] == pytest.approx(2.2e13 / 4 / 0.09 / 197e12)  # 31%
  assert est["tokens_per_s_per_chip"] == pytest.approx(32768 / 0.09 / 4)


class _Compiled:
  def __init__(self, analysis):
    self.analysis = analysis

  def cost_analysis(self):
    return self.analysis


def test_a_negative_time_is_refused_not_reported():
  # libtpu 0.0.52 counts each sliced-prefetch custom call as -1 s.
  with pytest.raises(ValueError, match="optimal_seconds is -8: .*uncounted"):
    cost_lib.compiler_cost(_Compiled({"flops": 2.5e9, "bytes accessed": 4.7e8,
                                      "optimal_seconds": -7.9993}))
  got = cost_lib.compiler_cost(_Compiled([{"flops": 1.0, "bytes accessed": 2.0,
                                           "optimal_seconds": 3.0}]))
  assert (got["flops"], got["bytes"], got["optimal_seconds"]) == (1.0, 2.0, 3.0)


def test_grad_accumulation_gives_no_estimate_rather_than_a_wrong_one():
  c = _config((4, 1, 1))
  c.train.grad_accum_steps = 2
  raw, why = cost_lib.step_cost(c, True, compile_twin=lambda _: pytest.fail("compiled"))
  assert raw is None and "microbatch loop once" in why


def test_scanned_layers_are_estimated_from_an_unrolled_twin(tmp_path, monkeypatch):
  """bert_tiny, scanned as on a pod: the report's cost is that of every layer, where the
  raw figures of the scanned program hold one; the sliced prefetch's -1 s is gone."""
  pytest.importorskip("libtpu")
  compiled = []
  real = compile_lib.compile_lowered

  def keep(name, phase, lower, compiler_options=None):
    step = real(name, phase, lower, compiler_options)
    compiled.append((compiler_options, step))
    return step
  monkeypatch.setattr(compile_lib, "compile_lowered", keep)
  config = _config((4, 1, 1), batch_size=16)
  config.model.scan_layers = True
  assert config.model.num_layers == 2
  report = check(config, "v5e:2x2", steps=("train",), output_dir=str(tmp_path),
                 config_name="bert_tiny")
  (main_options, main), (twin_options, twin) = compiled
  assert main_options is None and twin_options == cost_lib.COST_COMPILER_OPTIONS
  assert " while(" in main.hlo_text and " while(" not in twin.hlo_text  # scanned vs unrolled
  cost = report["steps"][0]["cost"]
  assert cost["method"] == "scanned layers: an unrolled twin compiled for the cost"
  unrolled = cost_lib.compiler_cost(twin.compiled)
  assert cost["flops_per_chip"] == pytest.approx(unrolled["flops"], rel=0.05)
  assert cost["optimal_seconds"] == pytest.approx(unrolled["optimal_seconds"], rel=0.05)
  # The scanned program's own figures: its loop body (one layer, forward and backward)
  # counted once, and a negative time from the sliced prefetches.
  raw = main.compiled.cost_analysis()
  raw = raw[0] if isinstance(raw, list) else raw
  assert raw["flops"] < 0.8 * unrolled["flops"]
  with pytest.raises(ValueError, match="uncounted"):
    cost_lib.compiler_cost(main.compiled)
  # The step's fields, consistent with each other and the chip.
  chip, _ = chips.parse_topology("v5e:2x2")
  tokens = 16 * 128
  assert cost["model_flops"] == pytest.approx(cost_lib.model_flops(
      report["state"]["num_params"], 2, 128, config.model.hidden_size, tokens))
  assert cost["est_mfu"] == pytest.approx(
      cost["model_flops"] / 4 / cost["optimal_seconds"] / chip.peak_bf16_flops)
  assert 0 < cost["est_mfu"] < 1 and cost["bytes_per_chip"] > 0
  assert cost["tokens_per_s_per_chip"] == pytest.approx(tokens / cost["optimal_seconds"] / 4)
  # Where the twin's bytes go (aot/traffic.py), by category, near the compiler's total.
  by = cost["bytes_by_category"]
  assert by["total_bytes"] == pytest.approx(cost["bytes_per_chip"], rel=0.25)
  assert by["by_category"]["optimizer update"] > 0 and by["by_category"]["attention"] > 0
  saved = json.loads((tmp_path / "report.json").read_text())
  assert saved["steps"][0]["cost"] == cost
  line = next(l for l in report_lib.format_report(report).splitlines()
              if "TPU compiler's estimate" in l)
  assert f"est. MFU {100 * cost['est_mfu']:.1f}%" in line and "unrolled twin" in line
  assert "its bytes by category: " in report_lib.format_report(report)
