"""bench/time_to_quality/demo_recipe.py trains every variant from scratch: an earlier
run's workdir is removed first, so `bert_jax.main` cannot resume it and report its old
figures (no training here: the child process is replaced by a fake that writes metrics)."""
import json
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "bench", "time_to_quality"), os.path.join(_ROOT, "bench")]
import demo_recipe  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def test_an_earlier_runs_workdir_is_removed_before_the_run(tmp_path, monkeypatch):
  workdir = tmp_path / "bert_time"
  workdir.mkdir()
  (workdir / "checkpoints").mkdir()
  (workdir / "metrics.jsonl").write_text(json.dumps({"perf/step_time_s": 99.0}) + "\n")
  seen = {}

  def fake_run(argv, **kwargs):
    # What the child would find: no earlier checkpoints, no earlier metrics.
    seen["left"] = sorted(os.listdir(workdir)) if workdir.exists() else None
    assert f"--workdir={workdir}" in argv
    workdir.mkdir(exist_ok=True)
    rows = [{"perf/step_time_s": t} for t in (5.0, 0.5, 0.5)]   # the first holds the compile
    (workdir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  monkeypatch.setattr(demo_recipe.subprocess, "run", fake_run)
  result = demo_recipe.run_variant(sys.executable, "bert", 10, str(tmp_path),
                                   str(tmp_path / "data"), True, "configs/bert_tiny.py:demo")
  assert seen["left"] is None
  assert result == {"variant": "bert", "steps": 10, "steps_per_s": 2.0}
