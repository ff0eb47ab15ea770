"""launch/gpu_env.sh's XLA flags exist in the installed XLA: XLA parses every flag of
XLA_FLAGS (GPU ones too) when a backend starts, and an unknown one aborts the process."""
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_xla_accepts_every_gpu_flag():
  script = (f'source {ROOT}/launch/gpu_env.sh && exec {sys.executable} -c '
            '"import jax; jax.devices(); import os; print(os.environ[\'XLA_FLAGS\'])"')
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                       timeout=300)
  assert res.returncode == 0, res.stderr[-2000:]
  flags = res.stdout.split()
  assert "--xla_gpu_enable_latency_hiding_scheduler=true" in flags and len(flags) >= 11
  # A misspelt flag is what this test would catch: XLA refuses it.
  bad = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                       env=dict(env, XLA_FLAGS="--xla_gpu_no_such_flag=true"),
                       capture_output=True, text=True, timeout=300)
  assert bad.returncode != 0 and "xla_gpu_no_such_flag" in bad.stderr
