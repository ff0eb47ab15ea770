"""bench/report.py renders RESULTS.md from bench/results/*.json, and --check says when the
committed page and the committed results differ (no jax: report.py is the standard
library and bench/results_io.py)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
import report  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import results_io  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def _result(suite, title, met, case="", carried=None, figures=None):
  res = {"suite": suite, "case": case, "title": title, "headline": f"{title}: 1.5x",
         "figures": figures or [results_io.figure("speed", 1.5, "x", "best of 3")],
         "goal": None if met == "no goal" else results_io.goal(f"{title} goal", ">= 1.2x", met),
         "anchor": "the reference", "command": f"python bench/{suite}.py --flag 'a b'",
         "machine": {"cpu": "Test CPU", "cores": 2, "memory_gib": 8.0, "os": "Linux",
                     "accelerator": "none"},
         "commit": {"sha": "0123456789abcdef", "dirty": True},
         "date": "2026-12-06T20:00:00+00:00", "load": {"before": 0.5, "after": 1.5},
         "carried": carried, "notes": ""}
  return res


def _check(*argv):
  return subprocess.run([sys.executable, os.path.join(BENCH, "report.py"), "--check", *argv],
                        capture_output=True, text=True, check=False)


def test_the_summary_opens_the_page_one_row_per_result_with_its_goal_and_link(tmp_path):
  results_io.write(_result("zeta", "Zeta suite", True), str(tmp_path))
  results_io.write(_result("alpha", "Alpha suite", False, case="big",
                           carried="from bench/RESULTS.md at abc1234"), str(tmp_path))
  results_io.write(_result("data", "Data only", "no goal"), str(tmp_path))
  results_io.write(_result("beta", "Beta suite", None), str(tmp_path))
  text = report.render(str(tmp_path))
  assert text.startswith("# Benchmark results\n")
  summary = text[:text.index("\n## ")]
  rows = [l for l in summary.splitlines() if l.startswith("| [")]
  # Goals first (by file name), then the data.
  assert [r.split("](")[0] for r in rows] == ["| [Alpha suite", "| [Beta suite",
                                              "| [Zeta suite", "| [Data only"]
  header = [l for l in summary.splitlines() if l.startswith("| result |")][0]
  assert header == "| result | goal | anchor | figure | hardware | met | date |"
  cells = [c.strip() for c in rows[0].strip("|").split(" | ")]
  assert cells == ["[Alpha suite](#alpha-suite)", "Alpha suite goal: >= 1.2x", "the reference",
                   "Alpha suite: 1.5x", "Test CPU, 2 cores", "not met",
                   "2026-12-06 (carried)"]
  assert rows[1].split(" | ")[5] == "not judged"
  assert rows[2].split(" | ")[5:] == ["met", "2026-12-06 |"]
  assert rows[3].split(" | ")[1] == "none" and rows[3].split(" | ")[5] == "-"
  section = text[text.index("## Alpha suite"):text.index("## Beta suite")]
  assert "`python bench/alpha.py --flag 'a b'`; commit `0123456789 (dirty)`" in section
  assert "carried from bench/RESULTS.md at abc1234" in section
  assert "load 0.5 before, 1.5 after" in section
  assert "| speed | 1.5 x | best of 3 |" in section
  assert report.render(str(tmp_path)) == text  # deterministic


def test_a_result_is_written_whole_and_names_what_it_lacks(tmp_path):
  path = results_io.write(_result("s", "S", True, case="c"), str(tmp_path))
  assert os.path.basename(path) == "s-c.json"
  assert sorted(os.listdir(tmp_path)) == ["s-c.json"]  # no temporary file left
  with open(path, encoding="utf-8") as f:
    assert json.load(f)["title"] == "S"
  bad = _result("s", "S", True)
  del bad["command"]
  with pytest.raises(ValueError, match="command"):
    results_io.write(bad, str(tmp_path))


def test_titles_with_one_anchor_are_refused(tmp_path):
  results_io.write(_result("a", "Same title", True), str(tmp_path))
  results_io.write(_result("b", "Same title!", True), str(tmp_path))
  with pytest.raises(ValueError, match="same-title"):
    report.render(str(tmp_path))


def test_a_result_measured_here_records_the_machine_commit_and_command(tmp_path):
  res = results_io.result("probe", "Probe", [results_io.figure("x", 1, "s")], "none", "x 1 s",
                          load_before=0.1)
  assert res["machine"]["cores"] >= 1 and res["machine"]["cpu"]
  assert len(res["commit"]["sha"]) == 40 and isinstance(res["commit"]["dirty"], bool)
  assert " python " in f" {res['command']}" and res["date"].endswith("+00:00")


def test_the_command_names_the_environment_that_changes_a_run(monkeypatch):
  monkeypatch.setenv("JAX_PLATFORMS", "cpu")
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
  got = results_io.command([os.path.join(ROOT, "bench", "x.py"), "--a", "b c"])
  assert got == "JAX_PLATFORMS=cpu python bench/x.py --a 'b c'"


def test_check_passes_on_the_committed_page():
  out = _check()
  assert out.returncode == 0, out.stdout + out.stderr
  with open(os.path.join(BENCH, "RESULTS.md"), encoding="utf-8") as f:
    assert f.read() == report.render()
  # A page one reads: 300 lines, plus the TPU cost suite's five cases (issue 65) and
  # ModernBERT's AOT and demo sections (issue 64).
  assert len(report.render().splitlines()) <= 400


def test_check_fails_when_a_result_changes_and_write_makes_it_pass(tmp_path):
  results = tmp_path / "results"
  shutil.copytree(os.path.join(BENCH, "results"), results)
  page = tmp_path / "RESULTS.md"
  shutil.copy(os.path.join(BENCH, "RESULTS.md"), page)
  argv = ["--results_dir", str(results), "--output", str(page)]
  assert _check(*argv).returncode == 0
  name = sorted(os.listdir(results))[0]
  with open(results / name, encoding="utf-8") as f:
    res = json.load(f)
  res["figures"][0]["value"] = "changed"
  with open(results / name, "w", encoding="utf-8") as f:
    json.dump(res, f)
  out = _check(*argv)
  assert out.returncode == 1 and "differs" in out.stdout and "line" in out.stdout
  assert len(out.stdout.strip().splitlines()) == 1
  assert subprocess.run([sys.executable, os.path.join(BENCH, "report.py"), *argv],
                        check=False).returncode == 0
  assert _check(*argv).returncode == 0
  os.remove(results / name)  # a result gone is a difference too
  assert _check(*argv).returncode == 1
