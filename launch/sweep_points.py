"""A sweep's points: `get_sweep(hyper)` of a config file, checked, selected, applied.

A point is a dict of overrides keyed by flag name ("config.train.learning_rate"). The
config is built once to check every key before any run starts (a misspelled key is one
error, not one failed run a point); `select` picks points by their values as the --aot
table writes them (`cell`); `set_key` applies an override to a locked config.
"""
from __future__ import annotations

import ast
import difflib
import importlib.util
import itertools
import os
import re
from typing import Sequence


class hyper:  # pylint: disable=invalid-name
  """The sweep vocabulary: a sweep is a list of override dicts."""

  @staticmethod
  def sweep(name: str, values) -> list[dict]:
    if not name.startswith("config."):
      raise ValueError(f"sweep keys are flag names like 'config.train.learning_rate', got {name!r}")
    return [{name: v} for v in values]

  @staticmethod
  def product(sweeps: list[list[dict]]) -> list[dict]:
    return [dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*sweeps)]

  @staticmethod
  def zipit(sweeps: list[list[dict]]) -> list[dict]:
    if len({len(s) for s in sweeps}) > 1:
      raise ValueError("zipit needs sweeps of equal length")
    return [dict(kv for d in combo for kv in d.items()) for combo in zip(*sweeps)]


def load_module(config_path: str):
  """The config file of `path[:arg]`, run as a module."""
  path = config_path.split(":", 1)[0]
  if not os.path.exists(path):
    raise FileNotFoundError(f"config file {path} does not exist")
  spec = importlib.util.spec_from_file_location("sweep_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_sweep(config_path: str, extra: Sequence[str] = ()) -> list[dict]:
  """The sweep's points (their overrides), checked against the config once, before any
  run is started or submitted: an unknown `file.py:arg`, or a sweep key or --config.x flag
  of `extra` that the config lacks, is one ValueError here, not a failure in every run."""
  path, _, arg = config_path.partition(":")
  module = load_module(config_path)
  if not hasattr(module, "get_sweep"):
    raise ValueError(f"{path} defines no get_sweep(hyper); configs that do: "
                     f"{', '.join(_configs_with_sweeps(path)) or 'none beside it'}")
  config = module.get_config(arg or None)
  points = module.get_sweep(hyper)
  _check_keys(config, points, extra)
  return points


def _configs_with_sweeps(path: str) -> list[str]:
  """The config files beside `path` that define get_sweep (read as text, not run)."""
  folder = os.path.dirname(path) or "."
  out = []
  for name in sorted(os.listdir(folder)):
    if name.endswith(".py"):
      with open(os.path.join(folder, name), encoding="utf-8") as f:
        if "\ndef get_sweep(" in f.read():
          out.append(os.path.join(os.path.dirname(path), name))
  return out


def run_name(overrides: dict) -> str:
  parts = [f"{k.split('.')[-1]}={v}" for k, v in overrides.items()]
  return re.sub(r"[^A-Za-z0-9_.=,-]", "_", ",".join(parts)) or "run"


def _check_keys(config, points: list[dict], extra: Sequence[str]) -> None:
  """Raises ValueError naming the first sweep key or --config.x flag `config` lacks."""
  keys = [f[2:].partition("=")[0] for f in extra] + [k for p in points for k in p]
  for key in dict.fromkeys(keys):
    node, path = config, "config"
    for name in key.split(".")[1:]:
      if not hasattr(node, "keys") or name not in node:
        have = sorted(node.keys()) if hasattr(node, "keys") else []
        near = difflib.get_close_matches(name, have, n=1)
        raise ValueError(f"{key}: {path} has no key {name!r}"
                         + (f"; did you mean {near[0]!r}?" if near else f" (it has {have})"))
      node, path = node[name], f"{path}.{name}"


def set_key(config, key: str, value) -> None:
  """config.a.b = value for a sweep key 'config.a.b' (the config stays locked)."""
  node = config
  *parents, leaf = key.split(".")[1:]
  for name in parents:
    node = node[name]
  node[leaf] = tuple(value) if isinstance(value, list) else value


def literal(text: str):
  """A --config.x=y value as python reads it (a number, a tuple), else the text."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


BATCH_KEY = "config.train.batch_size"


def strategy(overrides: dict) -> tuple:
  """A sweep point's strategy: its overrides other than the global batch, as table cells."""
  return tuple(cell(v) for k, v in overrides.items() if k != BATCH_KEY)


def cell(v) -> str:
  """A value as the --aot table writes it: a tuple (-1, 8, 4) as -1x8x4."""
  return "x".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)


def select(points: list[dict], where: list[str]) -> list[dict]:
  """The points whose overrides match every "KEY=V1|V2" of `where` (values as the table
  writes them: "-1x8x4", "full"; a tuple also as "(-1,8,4)"), e.g.
  ["config.model.remat_policy=dots_no_batch|full"]. A value no point has is an error."""
  for cond in where:
    key, _, values = cond.partition("=")
    if not values or not any(key in p for p in points):
      raise ValueError(f"--where {cond!r}: expected KEY=V1|V2 with KEY one of the sweep's "
                       f"keys {sorted(points[0]) if points else []}")
    cells = {cell(p[key]) for p in points if key in p}
    wanted = [_where_value(v) for v in values.split("|")]
    unknown = [v for v in wanted if v not in cells]
    if unknown:  # a selection of nothing would print an empty table or start no run
      raise ValueError(f"--where {cond!r}: no point has {key} = {' or '.join(unknown)}; "
                       f"its values: {', '.join(sorted(cells))}")
    points = [p for p in points if cell(p.get(key)) in wanted]
  return points


def _where_value(text: str) -> str:
  """A --where value as the table writes it: "(-1, 8, 4)" and "-1,8,4" -> "-1x8x4"."""
  return re.sub(r"[()\[\]\s]", "", text).replace(",", "x") if "," in text else text
