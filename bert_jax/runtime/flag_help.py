"""`--help` of the absl console scripts lists their flags, as `python -m MODULE` does.

absl's `--help` prints the docstring of `__main__` and the key flags of the module named
sys.argv[0]: the CLI module itself only when it runs as `__main__` (`python -m
bert_jax.main`). A console script's `__main__` is pip's wrapper (sys.argv[0] =
.../bin/bert-jax-train, no docstring), so its --help said "USAGE: bert-jax-train [flags]
... Try --helpfull" and nothing else.
"""
from __future__ import annotations

import sys

from absl import flags


def key_flags_in_help(module_name: str) -> None:
  """Makes --help list `module_name`'s key flags under its docstring, whatever runs it.

  Call it in the CLI's entry function after the module's flags are defined, before
  app.run, with the module's `__name__`.
  """
  if module_name == "__main__":  # python -m: absl finds both by itself
    return
  for flag in flags.FLAGS.get_key_flags_for_module(module_name):
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
  wrapper = sys.modules["__main__"]
  if not wrapper.__doc__:
    wrapper.__doc__ = sys.modules[module_name].__doc__
