"""The package as a user gets it: build the wheel, install it into a fresh venv, then run
`bert-jax-train` and the README's Python API example from a directory outside the repository.

Honest about the environment: the fresh venv is created empty (`venv --without-pip`) and
bert_jax is installed from the wheel with `pip --no-index --no-deps`; its third-party
packages come from this test venv through one `.pth` line (a plain path, so this venv's
own .pth hooks, e.g. the editable bert_jax finder, do not run), because CI has no network
for a full dependency install. That bert_jax is imported from the wheel, never from the
repository, is asserted.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HF = os.path.join(ROOT, "tests", "testdata", "hf")

pytestmark = pytest.mark.slow


def readme_example() -> str:
  """The first ```python block of README.md's "## Python API" section, exactly."""
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    text = f.read()
  section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
  return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _run(argv, **kwargs):
  proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300,
                        **kwargs)
  assert proc.returncode == 0, f"{argv}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
  return proc


def _user_env() -> dict:
  """A user's shell: no PYTHONPATH to the repository, one CPU device (no fake devices)."""
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}
  env.update(JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
  """(venv dir, its site-packages) with the wheel of this checkout installed."""
  tmp = tmp_path_factory.mktemp("wheel")
  src = tmp / "src"  # a clean copy: no stale build/ of the checkout can leak into the wheel
  shutil.copytree(os.path.join(ROOT, "bert_jax"), src / "bert_jax",
                  ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
  for name in ("pyproject.toml", "README.md"):
    shutil.copy(os.path.join(ROOT, name), src)
  _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "--no-index", "-w", tmp / "dist", src])
  (wheel,) = (tmp / "dist").glob("bert_jax-*.whl")
  names = zipfile.ZipFile(wheel).namelist()
  assert "bert_jax/configs/bert_tiny.py" in names and "bert_jax/api.py" in names
  assert not any(n.startswith(("tests/", "configs/")) for n in names)
  metadata = zipfile.ZipFile(wheel).read(
      next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
  requires = [line for line in metadata.splitlines()
              if line.startswith("Requires-Dist: ") and "extra ==" not in line]
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    dependencies = tomllib.load(f)["project"]["dependencies"]
  assert len(requires) == len(dependencies) > 0, requires  # not `dependencies = []`

  env_dir = tmp / "venv"
  _run([sys.executable, "-m", "venv", "--without-pip", env_dir])
  python = env_dir / "bin" / "python"
  _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index",
        "--no-deps", wheel])
  site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
              env=_user_env()).stdout.strip()
  with open(os.path.join(site, "_test_venv_packages.pth"), "w", encoding="utf-8") as f:
    f.write(sysconfig.get_paths()["purelib"] + "\n")
  return env_dir, site


def test_console_scripts_and_train_from_outside_the_repository(venv, tmp_path):
  env_dir, _ = venv
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    scripts = tomllib.load(f)["project"]["scripts"]
  for script in scripts:
    assert (env_dir / "bin" / script).is_file(), script
  _run([env_dir / "bin" / "bert-jax-embed", "--help"], cwd=tmp_path, env=_user_env())
  # bert_tiny from the installed package, shrunk to a 2-step run on a 38-line corpus file
  # (the embedded corpus takes ~40 s of CPU to prepare: too long for a test).
  shutil.copy(os.path.join(ROOT, "tests", "testdata", "data", "tiny_corpus.txt"), tmp_path)
  _run([env_dir / "bin" / "bert-jax-train", "--config", "bert_jax/configs/bert_tiny.py",
        "--workdir", "run", f"--config.data.data_dir={tmp_path / 'data'}",
        "--config.data.corpus=text", "--config.data.text_files=tiny_corpus.txt",
        "--config.data.vocab_size=256", "--config.model.vocab_size=256",
        "--config.data.max_seq_length=16", "--config.model.max_len=16",
        "--config.data.max_predictions_per_seq=4", "--config.data.dupe_factor=2",
        "--config.train.batch_size=4", "--config.train.num_steps=2",
        "--config.train.warmup_steps=1", "--config.train.log_every=1",
        "--config.train.eval_every=0", "--config.train.checkpoint_every=2",
        "--config.train.async_checkpoints=False"], cwd=tmp_path, env=_user_env())
  with open(tmp_path / "run" / "metrics.jsonl", encoding="utf-8") as f:
    losses = [row["train/loss"] for row in map(json.loads, f) if "train/loss" in row]
  assert len(losses) == 2 and all(np.isfinite(losses))
  assert (tmp_path / "run" / "checkpoints" / "2").is_dir()


def test_readme_api_example_runs_on_the_installed_package(venv, tmp_path):
  env_dir, site = venv
  example = readme_example()
  assert example.startswith("import bert_jax\n")
  assert len([l for l in example.splitlines() if l.strip()]) == 3
  check = ("\nimport numpy\nnumpy.save('vectors.npy', vectors)\n"
           "print(bert_jax.__file__)\n")
  proc = _run([env_dir / "bin" / "python", "-c", example + check], cwd=tmp_path,
              env=_user_env())
  imported = proc.stdout.strip().splitlines()[-1]
  assert imported == os.path.join(site, "bert_jax", "__init__.py"), imported
  # The example's two sentences are rows 0 and 2 of the sentence-transformers fixture.
  ref = np.load(os.path.join(HF, "minilm_embeddings.npz"))
  np.testing.assert_allclose(np.load(tmp_path / "vectors.npy"), ref["mean"][[0, 2]],
                             atol=1e-4, rtol=0)
