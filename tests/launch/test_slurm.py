"""launch/slurm.sbatch run by bash with a stand-in srun (no SLURM here)."""
import os
import re
import shutil
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "launch", "slurm.sbatch")


def _directives() -> dict:
  with open(SCRIPT, encoding="utf-8") as f:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", f.read(), re.M))


def test_every_task_sees_all_the_nodes_gpus():
  """JAX's SLURM detection gives task SLURM_LOCALID the GPU of that index among those it
  sees: --gpus-per-task=1 (one visible GPU per task) made tasks 1.. fail."""
  d = _directives()
  assert "gpus-per-task" not in d
  assert d["gpus-per-node"] == d["ntasks-per-node"] == "8"


def _run(tmp_path, venv: bool):
  submit = tmp_path / "checkout"
  (submit / ".venv" / "bin").mkdir(parents=True)
  (submit / "launch").mkdir()
  shutil.copy(os.path.join(ROOT, "launch", "gpu_env.sh"), submit / "launch")
  if venv:
    py = submit / ".venv" / "bin" / "python"
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  srun = bin_dir / "srun"
  srun.write_text('#!/bin/sh\nprintf "%s\\n" "$PWD" "$@"\necho "$XLA_FLAGS" > xla_flags\n')
  srun.chmod(0o755)
  env = dict(os.environ, SLURM_SUBMIT_DIR=str(submit), XLA_FLAGS="--caller_flag",
             PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
  return subprocess.run(["bash", SCRIPT, "--config", "configs/bert_base.py", "--workdir",
                         "/shared/run", "--config.mesh_shape=(-1, 8, 4)"],
                        env=env, capture_output=True, text=True)


def test_the_flags_reach_main_once_from_the_submit_dir(tmp_path):
  res = _run(tmp_path, venv=True)
  assert res.returncode == 0, res.stderr
  assert res.stdout.splitlines() == [
      str(tmp_path / "checkout"), "--kill-on-bad-exit=1", ".venv/bin/python", "-m",
      "bert_jax.main", "--config", "configs/bert_base.py", "--workdir", "/shared/run",
      "--config.mesh_shape=(-1, 8, 4)"]
  # launch/gpu_env.sh's flags reach the tasks, the caller's XLA_FLAGS after them.
  flags = (tmp_path / "checkout" / "xla_flags").read_text()
  assert "--xla_gpu_enable_latency_hiding_scheduler=true" in flags
  assert flags.split()[-1] == "--caller_flag"


def test_no_venv_in_the_submit_dir_is_one_line(tmp_path):
  res = _run(tmp_path, venv=False)
  assert res.returncode == 2 and res.stdout == ""
  assert res.stderr == (f"error: {tmp_path / 'checkout'}/.venv/bin/python not found: submit "
                        "from the bert_jax checkout holding .venv (see README)\n")
