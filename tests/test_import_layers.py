"""Imports inside bert_jax run downward only, and no two modules import each other.

Every `import` / `from ... import` of a bert_jax module counts, also those inside
functions (a lazy import is still a dependency, only a later one). The rooms (top-level
packages and modules of bert_jax) are ordered in LAYERS, lowest first, after
ARCHITECTURE.md's layout: building blocks, then models, data, the Hugging Face interop,
checkpoints (pretrained loading reads HF directories), the library that puts a trained
model to use (inference/: the commands, the pictures and the API all call it), the shared
loop, the tasks, the configs, and the user CLIs on top. A room may import its own layer
or any lower one, never a higher one; the rooms of one layer may use each other as long
as no circle forms (checked on rooms and on modules). A new room must be placed here.
"""
import ast
import collections
import os

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "bert_jax")

LAYERS = (
    ("runtime",),                                # no model: mesh, hosts, paths, CLI help
    ("kernels",),                                # fused attention behind one dispatch
    ("layers",),
    ("models", "hardware"),                      # hardware: chips, and the CPU tuning of layers
    ("data", "decoding"),
    ("interop",),                                # HF checkpoints <-> our trees
    ("checkpoint",),                             # orbax, and init_from: HF dirs via interop
    ("inference",),                              # a trained model used: load, encode, fill
    ("train",),                                  # the shared loop: never imports tasks/
    ("tasks", "word2vec"),                       # what is trained (word2vec: own trainer)
    ("configs",),                                # config files name tasks' tables
    ("apps", "aot", "visualize"),                # the user commands (apps/: bert_jax.<name>)
    ("main", "api", "__init__"),                 # what users run or import first
)
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _modules(root: str = PACKAGE) -> dict[str, str]:
  """Dotted module name -> file, for every .py under bert_jax/."""
  out = {}
  for dirpath, _, files in os.walk(root):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, os.path.dirname(root))[:-3].replace(os.sep, ".")
        if rel.startswith("bert_jax.apps."):  # the commands import as bert_jax.<name>
          rel = "bert_jax." + rel[len("bert_jax.apps."):]
        out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
  return out


def _target(name: str, modules) -> str | None:
  """The module an imported dotted name lives in (a name imported from it: its module)."""
  while name and name not in modules:
    name = name.rpartition(".")[0]
  return name or None


def import_graph(modules) -> dict[str, set[str]]:
  """module -> the bert_jax modules it imports (anywhere in the file)."""
  graph = collections.defaultdict(set)
  for module, path in modules.items():
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    for node in ast.walk(tree):
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the package, one level up per extra dot
          parts = package.split(".")[:len(package.split(".")) - node.level + 1]
          base = ".".join(parts + ([node.module] if node.module else []))
        names = [f"{base}.{a.name}" for a in node.names]  # a submodule, or a name in base
      for name in names:
        if name.split(".")[0] == "bert_jax":
          target = _target(name, modules)
          if target and target != module:
            graph[module].add(target)
  return graph


def room(module: str) -> str:
  """bert_jax.tasks.finetune.base -> tasks; bert_jax.runtime.paths -> paths; bert_jax -> __init__."""
  parts = module.split(".")
  if len(parts) == 2 and os.path.isfile(os.path.join(PACKAGE, "apps", parts[1] + ".py")):
    return "apps"
  return parts[1] if len(parts) > 1 else "__init__"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One circle of the graph as [a, b, ..., a], or None (iterative depth-first search)."""
  state = {}  # node -> 1 on the current path, 2 finished
  for start in sorted(graph):
    if start in state:
      continue
    path, stack = [], [(start, iter(sorted(graph.get(start, ()))))]
    state[start] = 1
    path.append(start)
    while stack:
      node, children = stack[-1]
      child = next(children, None)
      if child is None:
        state[node] = 2
        path.pop()
        stack.pop()
      elif state.get(child) == 1:
        return path[path.index(child):] + [child]
      elif child not in state:
        state[child] = 1
        path.append(child)
        stack.append((child, iter(sorted(graph.get(child, ())))))
  return None


def upward_imports(graph) -> list[str]:
  return sorted(f"{a} ({room(a)}, layer {LAYER[room(a)]}) imports {b} ({room(b)}, layer "
                f"{LAYER[room(b)]})" for a, targets in graph.items() for b in targets
                if LAYER[room(b)] > LAYER[room(a)])


MODULES = _modules()
GRAPH = import_graph(MODULES)


def test_every_room_has_a_layer():
  assert sorted({room(m) for m in MODULES} - set(LAYER)) == [], \
      "place the new room in LAYERS (tests/test_import_layers.py)"


def test_no_import_runs_upward():
  assert upward_imports(GRAPH) == []


def test_no_import_circle():
  assert find_cycle(GRAPH) is None
  rooms = collections.defaultdict(set)
  for a, targets in GRAPH.items():
    rooms[room(a)].update(room(b) for b in targets if room(b) != room(a))
  assert find_cycle(rooms) is None


# The scan itself, on a small package written here: it must see what it is meant to see.
@pytest.fixture()
def toy(tmp_path):
  def write(files):
    for name, text in files.items():
      path = tmp_path / "bert_jax" / name
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(text)
      for parent in path.relative_to(tmp_path).parents:
        if str(parent) != ".":
          (tmp_path / parent / "__init__.py").touch()
    return _modules(str(tmp_path / "bert_jax"))
  return write


def test_scan_sees_lazy_relative_and_from_imports(toy):
  modules = toy({
      "layers/a.py": "def f():\n  from bert_jax.tasks import registry\n",
      "tasks/registry.py": "from . import base\nimport bert_jax.train.loop as loop\n",
      "tasks/base.py": "from bert_jax.models.bert import Bert\n",
      "train/loop.py": "", "models/bert.py": ""})
  graph = import_graph(modules)
  assert graph["bert_jax.layers.a"] == {"bert_jax.tasks.registry"}
  assert graph["bert_jax.tasks.registry"] == {"bert_jax.tasks.base", "bert_jax.train.loop"}
  assert graph["bert_jax.tasks.base"] == {"bert_jax.models.bert"}
  assert upward_imports(graph) == [
      f"bert_jax.layers.a (layers, layer {LAYER['layers']}) imports bert_jax.tasks.registry "
      f"(tasks, layer {LAYER['tasks']})"]
  assert find_cycle(graph) is None


def test_scan_finds_a_circle(toy):
  graph = import_graph(toy({
      "export.py": "from bert_jax.tasks import registry\n",
      "tasks/registry.py": "def g():\n  from bert_jax import export\n"}))
  assert find_cycle(graph) == ["bert_jax.export", "bert_jax.tasks.registry", "bert_jax.export"]
