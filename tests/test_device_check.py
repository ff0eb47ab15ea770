"""bench/device_check.py --smoke: every part of the GPU check, tiny, on this CPU, in a
process where tensorflow-datasets, grain, array_record and gensim cannot be imported (a
stock CUDA image has none of them): the model and step code must not need them."""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BLOCKED = ("tensorflow_datasets", "grain", "array_record", "gensim", "tensorflow")
RUNNER = f"""
import importlib.abc, runpy, sys
class Blocked(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name.split(".")[0] in {BLOCKED!r}:
      raise ImportError(f"{{name}} is blocked (a stock CUDA image has none)")
sys.meta_path.insert(0, Blocked())
sys.argv = ["bench/device_check.py"] + sys.argv[1:]
runpy.run_path("bench/device_check.py", run_name="__main__")
"""


def test_smoke_runs_every_part_without_the_data_packages(tmp_path):
  out = tmp_path / "check.json"
  res = subprocess.run([sys.executable, "-c", RUNNER, "--smoke", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert res.returncode == 0, res.stderr[-3000:]
  assert "| part | case | result | ok |" in res.stdout
  result = json.loads(out.read_text())
  attention = {(r["case"], r["impl"]): r for r in result["attention"]}
  assert sorted(attention) == sorted((c, i) for c in ("padded", "packed", "causal")
                                     for i in ("auto", "xla"))
  assert all(r["ok"] and r["max_rel_err"] < 3e-2 for r in attention.values())
  assert [r["name"] for r in result["train"]] == ["bert_tiny_s16", "modernbert_tiny_s32",
                                                  "gpt_tiny_s32"]
  for r in result["train"]:
    assert r["step_s"] > 0 and r["mfu"] > 0 and r["final_loss"] == r["final_loss"]
    local = "; xla (no fused kernel on cpu, local window 4)" if "modernbert" in r["name"] else ""
    assert r["attention"] == "xla (no fused kernel on cpu)" + local
    assert glob.glob(str(tmp_path / "profile" / r["name"] / "plugins" / "profile" / "*" /
                         "*.xplane.pb"))
  assert result["decode"]["2"] > 0
  assert result["cli"]["skipped"].startswith("data packages absent (tensorflow_datasets")
  if "skipped" in result["torch"]:   # this venv has no torch: one line says so
    assert "no torch + transformers" in result["torch"]["skipped"]
