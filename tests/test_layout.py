"""The package's shape as issue 62 set it, so it cannot regress: what a reader of the
attention layer or of the BERT model must open (their reading closures), the import rules
of the model code, a short package root, and no source file over 400 lines.

A reading closure: the bert_jax modules a module imports, followed transitively, with
their line counts added up; kernels/ modules are counted where imported but not followed
(a reader of the model reads the dispatch, not the kernels behind it).
"""
import ast
import os
import re

import pytest

from tests import test_import_layers as layering

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "bert_jax")
ATTENTION_MAX_LINES = 800
BERT_MAX_LINES = 1300
ROOT_MAX_PY = 8
FILE_MAX_LINES = 400


def _lines(path: str) -> int:
  with open(path, encoding="utf-8") as f:
    return sum(1 for _ in f)


def reading_closure(module: str, graph=layering.GRAPH, modules=layering.MODULES) -> dict:
  """module -> lines, for `module` and every bert_jax module it reads through, over the
  import graph tests/test_import_layers.py scans (lazy imports included)."""
  seen, todo = {}, [module]
  while todo:
    name = todo.pop()
    if name in seen:
      continue
    seen[name] = _lines(modules[name])
    if not name.startswith("bert_jax.kernels"):
      todo.extend(graph.get(name, ()))
  return seen


def _py_files(*dirs):
  for top in dirs:
    for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
      if "__pycache__" not in dirpath:
        yield from (os.path.join(dirpath, f) for f in files if f.endswith(".py"))


def test_the_attention_layer_reads_in_under_800_lines():
  closure = reading_closure("bert_jax.layers.attention")
  assert sum(closure.values()) <= ATTENTION_MAX_LINES, closure
  assert "bert_jax.kernels" in closure   # the one dispatch function


def test_the_bert_model_reads_within_its_budget():
  closure = reading_closure("bert_jax.models.bert")
  assert sum(closure.values()) <= BERT_MAX_LINES, closure
  assert not any(m.startswith("bert_jax.hardware") for m in closure)


@pytest.mark.parametrize("room", ["layers", "models"])
def test_model_code_is_plain_for_every_backend(room):
  """No private jax or orbax, no environment, no backend checks, nothing of hardware/."""
  bad = []
  for path in _py_files(os.path.join("bert_jax", room)):
    with open(path, encoding="utf-8") as f:
      text = f.read()
    tree = ast.parse(text, path)
    for node in ast.walk(tree):
      names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
               [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
      bad += [f"{path}: imports {n}" for n in names
              if n.startswith(("jax._src", "orbax.checkpoint._src", "bert_jax.hardware"))]
      if isinstance(node, ast.ImportFrom) and node.module == "bert_jax":
        bad += [f"{path}: imports hardware" for a in node.names if a.name == "hardware"]
      if isinstance(node, ast.Attribute) and node.attr in ("environ", "default_backend"):
        bad.append(f"{path}: uses .{node.attr}")
  assert bad == []


# A figure with a unit, a version pin, a speed claim or a bench citation.
_FIGURES = re.compile(r"RESULTS|\bjax \d+\.\d|\d(\.\d+)? ?(ms|GiB|MiB|GB/s|TFLOP/s|seconds)\b"
                      r"|\d+(\.\d+)?x (faster|slower)|\d+% (faster|slower)")


@pytest.mark.parametrize("room", ["layers", "models"])
def test_model_code_comments_carry_no_timings_or_pins(room):
  """Design notes with figures live in docs pages, which the code may name."""
  hits = []
  for path in _py_files(os.path.join("bert_jax", room)):
    with open(path, encoding="utf-8") as f:
      hits += [f"{os.path.relpath(path, ROOT)}:{i}: {line.strip()}"
               for i, line in enumerate(f, 1) if _FIGURES.search(line)]
  assert hits == []


def test_the_package_root_is_short():
  root = sorted(f for f in os.listdir(PACKAGE) if f.endswith(".py"))
  assert len(root) <= ROOT_MAX_PY, root


def test_no_source_file_over_400_lines():
  long = {os.path.relpath(p, ROOT): _lines(p) for p in _py_files("bert_jax", "bench", "launch",
                                                                   "scripts")
          if _lines(p) > FILE_MAX_LINES}
  assert long == {}


def test_the_closure_follows_the_graph_and_stops_at_kernels():
  """The walk itself: a kernels/ module is counted where imported, not followed."""
  closure = reading_closure("bert_jax.layers.attention")
  assert "bert_jax.runtime.sharding" in closure
  assert not any(m in closure for m in ("bert_jax.kernels.splash", "bert_jax.kernels.cudnn"))
  graph = {"bert_jax.a": {"bert_jax.kernels"}, "bert_jax.kernels": {"bert_jax.b"}}
  modules = {m: layering.MODULES["bert_jax.runtime.sharding"]
             for m in ("bert_jax.a", "bert_jax.kernels", "bert_jax.b")}
  assert set(reading_closure("bert_jax.a", graph, modules)) == {"bert_jax.a", "bert_jax.kernels"}
