"""pyproject.toml against the pinned requirements, the console scripts against the CLIs,
and --config paths that resolve inside the installed package (bert_jax/configs)."""
import ast
import os
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bert_jax import configs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _project():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)["project"]


def _pins(*names) -> dict:
  """{canonical name: pinned version} of requirements files (their own -r lines skipped)."""
  pins = {}
  for name in names:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
      for line in f:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
          continue
        req = Requirement(line)
        (spec,) = req.specifier  # every line is one exact pin
        assert spec.operator == "==", line
        pins[canonicalize_name(req.name)] = spec.version
  return pins


def _ranges(requirements) -> dict:
  return {canonicalize_name(r.name): r.specifier for r in map(Requirement, requirements)}


def test_dependencies_are_requirements_txt_as_ranges_admitting_the_pins():
  pins, ranges = _pins("requirements.txt"), _ranges(_project()["dependencies"])
  assert sorted(ranges) == sorted(pins)  # nothing missing, nothing unpinned
  for name, version in pins.items():
    assert ranges[name].contains(version), (name, version, str(ranges[name]))
    assert "==" not in str(ranges[name]), f"{name}: a range, not a pin"


def test_extras_admit_the_pins_of_their_requirements_files():
  extras = {k: _ranges(v) for k, v in _project()["optional-dependencies"].items()}
  assert {"tf", "bench", "tpu"} <= set(extras)
  test_pins = _pins("requirements-test.txt")
  for extra, name, version in [
      ("tf", "tensorflow-cpu", _pins("requirements-tf.txt")["tensorflow-cpu"]),
      ("tpu", "libtpu", test_pins["libtpu"]), ("gcs", "gcsfs", test_pins["gcsfs"]),
      ("wandb", "wandb", test_pins["wandb"]),
      ("beam", "apache-beam", test_pins["apache-beam"]),
      ("dataflow", "apache-beam", test_pins["apache-beam"])]:
    assert extras[extra][name].contains(version), (extra, name, version)
  # bench/requirements-bench.txt: each package is a dependency or in the bench/tpu extras.
  core = _ranges(_project()["dependencies"])
  for name, version in _pins("bench/requirements-bench.txt").items():
    spec = core.get(name) or extras["bench"].get(name) or extras["tpu"].get(name)
    assert spec is not None and spec.contains(version), (name, version)


def _cli_modules() -> set:
  """Modules of bert_jax/ with an `if __name__ == "__main__":` block (the user CLIs)."""
  found = set()
  for dirpath, _, files in os.walk(os.path.join(ROOT, "bert_jax")):
    for name in files:
      if not name.endswith(".py"):
        continue
      path = os.path.join(dirpath, name)
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
      if any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body):
        module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        found.add(module.replace("bert_jax.apps.", "bert_jax.", 1))  # imported as bert_jax.<name>
  return found


def _module_file(module: str) -> str:
  """The file of a dotted module; bert_jax.<name> may be a command in bert_jax/apps/ (the
  package's __path__ includes it)."""
  path = os.path.join(ROOT, *module.split(".")) + ".py"
  parts = module.split(".")
  if not os.path.isfile(path) and len(parts) == 2 and parts[0] == "bert_jax":
    path = os.path.join(ROOT, "bert_jax", "apps", parts[1] + ".py")
  return path


def _top_level_functions(module: str) -> set:
  # Read, not imported: the absl CLIs define global flags (main's and translate's
  # --workdir) that cannot be defined twice in one process. tests/test_wheel.py runs them.
  with open(_module_file(module), encoding="utf-8") as f:
    return {n.name for n in ast.parse(f.read()).body if isinstance(n, ast.FunctionDef)}


def test_every_cli_has_a_console_script_that_resolves():
  scripts = _project()["scripts"]
  targets = {}
  for script, target in scripts.items():
    assert re.fullmatch(r"bert-jax-[a-z0-9-]+", script), script
    module, attr = target.split(":")
    assert attr in _top_level_functions(module), target
    targets[module] = script
  assert sorted(_cli_modules()) == sorted(targets), "a CLI without a console script"
  assert scripts["bert-jax-train"] == "bert_jax.main:entry"


def test_configs_ship_in_the_package_and_the_top_level_dir_is_the_same_files():
  top = os.path.join(ROOT, "configs")
  assert os.path.islink(top) and os.path.realpath(top) == configs.CONFIG_DIR
  names = sorted(n for n in os.listdir(configs.CONFIG_DIR) if n.endswith(".py"))
  assert "bert_tiny.py" in names and "__init__.py" in names
  # Config files import bert_jax, ml_collections and the standard library only: nothing
  # that exists in a checkout but not in the wheel (e.g. the top-level configs/).
  allowed = {"bert_jax", "ml_collections", "__future__", *sys.stdlib_module_names}
  for name in names:
    with open(os.path.join(configs.CONFIG_DIR, name), encoding="utf-8") as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom):
        assert not node.level, f"{name}: relative import"
        modules = [node.module]
      elif isinstance(node, ast.Import):
        modules = [a.name for a in node.names]
      else:
        continue
      for module in modules:
        assert module.split(".")[0] in allowed, f"{name} imports {module}"


def test_config_paths_resolve_in_the_installed_package(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # outside the repository: no configs/ here
  tiny = os.path.join(configs.CONFIG_DIR, "bert_tiny.py")
  assert configs.resolve("bert_jax/configs/bert_tiny.py") == tiny
  assert configs.resolve("configs/bert_tiny.py:arg") == tiny + ":arg"
  (tmp_path / "configs").mkdir()
  (tmp_path / "configs" / "bert_tiny.py").write_text("# a local file wins\n")
  assert configs.resolve("configs/bert_tiny.py") == "configs/bert_tiny.py"
  with pytest.raises(FileNotFoundError, match="--config bert_jax/configs/nope.py does not exist"):
    configs.resolve("bert_jax/configs/nope.py")
  with pytest.raises(FileNotFoundError, match="which has bert_base.py, bert_large.py"):
    configs.resolve("nope.py")
  argv = ["prog", "--config", "bert_jax/configs/gpt.py:tiny", "--config.seed=1",
          "--config=bert_jax/configs/gpt.py", "--workdir", "w"]
  gpt = os.path.join(configs.CONFIG_DIR, "gpt.py")
  assert configs.resolve_argv(argv) == ["prog", "--config", gpt + ":tiny", "--config.seed=1",
                                        f"--config={gpt}", "--workdir", "w"]


def test_train_cli_missing_config_is_one_line_and_status_2(tmp_path):
  proc = subprocess.run([sys.executable, "-m", "bert_jax.main", "--config", "nope.py:x",
                         f"--workdir={tmp_path}"], capture_output=True, text=True,
                        timeout=120, cwd=ROOT)
  assert proc.returncode == 2
  assert proc.stderr.startswith("error: --config nope.py does not exist")
  assert "Traceback" not in proc.stderr
