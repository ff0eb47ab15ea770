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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "bert_jax")
ATTENTION_MAX_LINES = 800
BERT_MAX_LINES = 1300
ROOT_MAX_PY = 8
FILE_MAX_LINES = 400


def module_file(name: str) -> str | None:
  """bert_jax.a.b -> its file (a module, a package's __init__, or a command in apps/)."""
  rel = name.split(".")[1:]
  for cand in (os.path.join(PACKAGE, *rel) + ".py", os.path.join(PACKAGE, *rel, "__init__.py"),
               os.path.join(PACKAGE, "apps", *rel) + ".py"):
    if rel and os.path.isfile(cand) or not rel and cand.endswith("__init__.py"):
      return cand
  return None


def imported_modules(path: str, module: str) -> set[str]:
  """The bert_jax modules `path` imports anywhere (also inside functions)."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    else:
      continue
    for name in names:
      while name.startswith("bert_jax.") and not module_file(name):
        name = name.rpartition(".")[0]
      if name.startswith("bert_jax.") and name != module:
        found.add(name)
  return found


def _lines(path: str) -> int:
  with open(path, encoding="utf-8") as f:
    return sum(1 for _ in f)


def reading_closure(module: str) -> dict[str, int]:
  """module -> lines, for `module` and every bert_jax module it reads through."""
  seen, todo = {}, [module]
  while todo:
    name = todo.pop()
    if name in seen:
      continue
    path = module_file(name)
    seen[name] = _lines(path)
    if not name.startswith("bert_jax.kernels"):
      todo.extend(imported_modules(path, name))
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


def test_the_closure_sees_lazy_imports_and_stops_at_kernels(tmp_path):
  """The walk itself: a lazy import counts, a kernels/ module is counted, not followed."""
  closure = reading_closure("bert_jax.layers.attention")
  assert "bert_jax.runtime.sharding" in closure
  assert not any(m in closure for m in ("bert_jax.kernels.splash", "bert_jax.kernels.cudnn"))
  source = tmp_path / "m.py"
  source.write_text("def f():\n  from bert_jax.layers import dense\n")
  assert imported_modules(str(source), "x") == {"bert_jax.layers", "bert_jax.layers.dense"}
