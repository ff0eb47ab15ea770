"""bench/aot/tpu_cost.py's result from its rows: the speed-ups, MFU and the goal (made-up
rows, no compile)."""
import importlib
import os
import sys

import pytest

from bert_jax import hardware

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def tpu_cost(monkeypatch):
  monkeypatch.setattr(hardware, "configure", lambda: None)  # an entry point's; not here
  monkeypatch.syspath_prepend(os.path.join(_ROOT, "bench"))
  monkeypatch.syspath_prepend(os.path.join(_ROOT, "bench", "aot"))
  return importlib.import_module("tpu_cost")


def _row(seconds, mfu, fits=True):
  cost = {"optimal_seconds": seconds, "est_mfu": mfu, "bytes_per_chip": 5e10}
  return {"fits": fits, "hbm_gib": 4.0, "cost": cost if fits else None, "remat": "none",
          "mesh": {"data": 4}, "error": "" if fits else "RESOURCE_EXHAUSTED: 20G"}


def _figure(res, name):
  return next(f["value"] for f in res["figures"] if f["name"].startswith(name))


def test_speedups_and_the_goal(tpu_cost):
  rows = {"ours": _row(0.05, 0.60), "ours_like": _row(0.06, 0.50),
          "ours_reference": _row(0.055, 0.55), "theirs": _row(0.08, 0.35)}
  res = tpu_cost.case_result("base_s128_b1024", rows, load_before=0.1)
  assert res["suite"] == "tpu_cost" and res["case"] == "base_s128_b1024"
  assert _figure(res, "Flax BERT / ours:") == 1.6            # 0.08 / 0.05
  assert _figure(res, "Flax BERT / ours_like:") == pytest.approx(1.33)
  assert _figure(res, "fused attention dropout") == pytest.approx(0.909)
  assert _figure(res, "ours (remat none") == "50.0 ms, est. MFU 60.0%"
  assert res["goal"]["met"] is True and "55%" in res["goal"]["threshold"]
  # 1.6x faster but below the case's MFU goal: not met.
  rows["ours"] = _row(0.05, 0.54)
  assert tpu_cost.case_result("base_s128_b1024", rows, 0.1)["goal"]["met"] is False


def test_theirs_that_does_not_fit_is_compared_with_remat(tpu_cost):
  rows = {"ours": _row(0.2, 0.5), "ours_like": _row(0.25, 0.4),
          "ours_reference": _row(0.3, 0.3), "theirs": _row(0, 0, fits=False),
          "theirs_remat": _row(0.22, 0.45)}
  res = tpu_cost.case_result("base_s128_b256", rows, 0.1)   # no MFU goal at this case
  assert "theirs (remat none, mesh {'data': 4}): does not fit" in [
      f["name"] for f in res["figures"]]
  assert _figure(res, "Flax BERT / ours:") == 1.1 and res["goal"]["met"] is False


def test_written_out_attention_that_does_not_fit_is_compared_at_remat_full(tpu_cost):
  """BERT-large S512 without remat: the written-out path does not fit, so the fused /
  written-out figure is the ratio of the two compiled again at remat full."""
  rows = {"ours": _row(0.17, 0.52), "ours_reference": _row(0, 0, fits=False),
          "ours_remat_full": _row(0.2, 0.45), "ours_reference_remat_full": _row(0.25, 0.36),
          "theirs": _row(0.23, 0.39)}
  res = tpu_cost.case_result("large_s512_b256", rows, 0.1)
  fused = next(f for f in res["figures"] if f["name"].startswith("fused attention dropout"))
  assert fused["value"] == 0.8 and "remat full" in fused["note"]      # 0.2 / 0.25
  assert _figure(res, "Flax BERT / ours:") == pytest.approx(1.35)
  assert res["goal"]["met"] is True
  del rows["ours_remat_full"], rows["ours_reference_remat_full"]
  assert not any(f["name"].startswith("fused attention dropout")
                 for f in tpu_cost.case_result("large_s512_b256", rows, 0.1)["figures"])


def test_a_step_that_fits_without_an_estimate_says_why(tpu_cost):
  rows = {"ours": _row(0.2, 0.5), "ours_reference": dict(_row(0.3, 0.3), cost=None,
                                                         cost_note="unknown: -1 s"),
          "theirs": _row(0.22, 0.45)}
  res = tpu_cost.case_result("base_s128_b256", rows, 0.1)
  unknown = next(f for f in res["figures"] if "estimate unknown" in f["name"])
  assert unknown["name"].startswith("ours_reference") and unknown["note"] == "unknown: -1 s"
  assert not any(f["name"].startswith("fused attention") for f in res["figures"])
