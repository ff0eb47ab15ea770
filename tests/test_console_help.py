"""Every console script of pyproject answers --help with its flags, as `python -m` does.

A console script's `__main__` is pip's wrapper, not the CLI module, and absl's --help
lists only the key flags of `__main__`'s module: without bert_jax.runtime.flag_help the absl CLIs
printed "USAGE: bert-jax-train [flags] ... Try --helpfull" and no flag. The wrapper is
reproduced by `python -c` calling the script's entry function (the installed scripts in
the venv point at the main checkout, not at this one).
"""
import ast
import os
import subprocess
import sys
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Per script: flags its --help must list (the required ones and one more).
FLAGS = {
    "bert-jax-train": ["--config", "--workdir", "--compilation_cache"],
    "bert-jax-translate": ["--workdir", "--input", "--beam_size"],
    "bert-jax-export": ["--workdir", "--output", "--checkpoint"],
    "bert-jax-aot": ["--config", "--topology", "--output_dir"],
    "bert-jax-word2vec-query": ["--vectors", "--neighbors", "--analogy"],
    "bert-jax-prepare": ["--config", "--beam_runner", "--beam_options"],
    "bert-jax-embed": ["--checkpoint", "--input", "--output"],
    "bert-jax-fill-mask": ["--checkpoint", "--text", "--top_k"],
    "bert-jax-generate": ["--checkpoint", "--prompt", "--max_new_tokens"],
    "bert-jax-visualize": ["attention", "positions", "curves"],
    "bert-jax-demo-report": ["--workdir", "--text", "--top_k"],
}


def _scripts() -> dict[str, str]:
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    return tomllib.load(f)["project"]["scripts"]


def test_every_console_script_is_checked():
  assert sorted(_scripts()) == sorted(FLAGS)


def _source(module: str) -> str:
  """The file of a dotted module; bert_jax.<name> may be a command in bert_jax/apps/ (the
  package's __path__ includes it)."""
  path = os.path.join(ROOT, *module.split(".")) + ".py"
  parts = module.split(".")
  if not os.path.isfile(path) and len(parts) == 2 and parts[0] == "bert_jax":
    path = os.path.join(ROOT, "bert_jax", "apps", parts[1] + ".py")
  with open(path, encoding="utf-8") as f:
    return f.read()


def _docstring(module: str) -> str:
  return ast.get_docstring(ast.parse(_source(module)), clean=False)


def _is_absl(target: str) -> bool:
  return "app.run(" in _source(target.split(":")[0])


def test_help_of_the_absl_scripts_lists_their_flags():
  """One process per script (their --config flags cannot share absl's registry), all
  started together; the CPU time is their imports (~8 s in all)."""
  procs = {}
  for script, target in _scripts().items():
    if not _is_absl(target):
      continue
    module, func = target.split(":")
    code = (f"import sys; sys.argv[0] = {script!r}; from {module} import {func}; "
            f"sys.exit({func}())")
    procs[script] = subprocess.Popen(
        [sys.executable, "-c", code, "--help"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert len(procs) == 6
  for script, proc in procs.items():
    module = _scripts()[script].split(":")[0]
    out = proc.communicate(timeout=120)[0]
    # absl's --help exits 1 (also under `python -m`).
    assert proc.returncode == 1 and "Traceback" not in out, (script, out)
    missing = [f for f in FLAGS[script] if f not in out]
    assert not missing, f"{script} --help lacks {missing}:\n{out}"
    doc = _docstring(module).strip().splitlines()[0]
    assert out.startswith(doc) and "\nflags:\n" in out, out  # the docstring, then flags


def test_help_of_the_argparse_scripts_lists_their_flags(capsys):
  """These parse with argparse, which lists its flags whatever __main__ is: in process."""
  import importlib  # pylint: disable=g-import-not-at-top
  checked = 0
  for script, target in _scripts().items():
    if _is_absl(target):
      continue
    module, func = target.split(":")
    assert getattr(importlib.import_module(module), func)(["--help"]) == 0
    out = capsys.readouterr().out
    missing = [f for f in FLAGS[script] if f not in out]
    assert not missing, f"{script} --help lacks {missing}:\n{out}"
    checked += 1
  assert checked == 5
