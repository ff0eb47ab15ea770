"""The config files (`get_config(arg)`), shipped inside the package.

They live here so that an installed wheel has them; the repository's top-level `configs/`
is a symlink to this directory, so from a checkout `--config configs/bert_tiny.py` and
`--config bert_jax/configs/bert_tiny.py` name the same file. Config files import from
bert_jax only.

From anywhere else (an installed wheel), `--config bert_jax/configs/bert_tiny.py` (or
`configs/bert_tiny.py`) is found inside the installed package when no such file exists
relative to the working directory: `resolve` below, applied by the CLIs that take
`--config` before absl parses it.
"""
from __future__ import annotations

import os
from typing import Sequence

CONFIG_DIR = os.path.dirname(os.path.abspath(__file__))

# Path prefixes that name this directory: bert_jax/configs/x.py, configs/x.py.
_PREFIXES = (("bert_jax", "configs"), ("configs",))


def resolve(value: str) -> str:
  """`path[:arg]` with path as given if it exists, else the installed package's copy.

  Raises FileNotFoundError (one line, both places named) when neither exists.
  """
  path, sep, arg = value.partition(":")
  if os.path.exists(path):
    return value
  parts = tuple(p for p in os.path.normpath(path).split(os.sep) if p)
  if not os.path.isabs(path):
    for prefix in _PREFIXES:
      if parts[:len(prefix)] == prefix and len(parts) > len(prefix):
        candidate = os.path.join(CONFIG_DIR, *parts[len(prefix):])
        if os.path.isfile(candidate):
          return candidate + sep + arg
  names = sorted(n for n in os.listdir(CONFIG_DIR) if n.endswith(".py") and n[0] != "_")
  raise FileNotFoundError(
      f"--config {path} does not exist (relative to {os.getcwd()}, nor as "
      f"bert_jax/configs/... in the installed package {CONFIG_DIR}, which has "
      f"{', '.join(names)})")


def resolve_argv(argv: Sequence[str]) -> list[str]:
  """argv with the value of `--config X` / `--config=X` resolved (overrides untouched)."""
  out, rest = [], list(argv)
  while rest:
    arg = rest.pop(0)
    if arg in ("--config", "-config") and rest:
      out += [arg, resolve(rest.pop(0))]
    elif arg.startswith(("--config=", "-config=")):
      flag, value = arg.split("=", 1)
      out.append(f"{flag}={resolve(value)}")
    else:
      out.append(arg)
  return out

