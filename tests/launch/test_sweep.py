import importlib.util
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _sweep_module():
  spec = importlib.util.spec_from_file_location("sweep", os.path.join(ROOT, "launch", "sweep.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_dry_run_prints_one_command_per_point_with_distinct_workdirs():
  out = subprocess.run(
      [sys.executable, "launch/sweep.py", "--config", "configs/bert_base.py",
       "--workdir_root", "/tmp/sw", "--dry_run", "--config.train.num_steps=10"],
      cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip().splitlines()
  assert len(out) == 6  # 3 learning rates x 2 warmups
  workdirs = {a for line in out for a in line.split() if a.startswith("--workdir=")}
  assert len(workdirs) == 6
  assert all("--config.train.num_steps=10" in line for line in out)
  assert any("--config.train.learning_rate=0.0002" in l and "--config.train.warmup_steps=5000" in l
             for l in out)


def test_product_zip_and_launchers():
  sw = _sweep_module()
  h = sw.hyper
  pts = h.product([h.sweep("config.a", [1, 2]), h.sweep("config.b", ["x"])])
  assert pts == [{"config.a": 1, "config.b": "x"}, {"config.a": 2, "config.b": "x"}]
  assert h.zipit([h.sweep("config.a", [1, 2]), h.sweep("config.b", [3, 4])])[1] == {
      "config.a": 2, "config.b": 4}

  class Args:
    launcher, tpu_name, zone, remote_dir = "tpu", "pod", "zone-a", "~/bj"
  cmd = sw.wrap(["python", "-m", "bert_jax.main", "--workdir=w"], Args)
  assert cmd[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh"] and "--worker=all" in cmd


def test_missing_config_is_a_clear_error():
  res = subprocess.run([sys.executable, "launch/sweep.py", "--config", "configs/nope.py",
                        "--workdir_root", "/tmp/sw", "--dry_run"], cwd=ROOT,
                       capture_output=True, text=True)
  assert res.returncode == 2 and "configs/nope.py does not exist" in res.stderr
