"""The flag parsers of the CLIs: absl's for those that take `--config` (bert_jax.main,
bert_jax.aot), argparse's for those whose `main` returns an exit status."""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Optional, Sequence, Union

from absl import flags

from bert_jax import configs
from bert_jax import hardware


def parse_flags(argv: Sequence[str]) -> list[str]:
  """absl's parser for a CLI taking --config: the file resolved (configs.resolve), any error
  (a missing file, a bad flag, a misspelled --config.key, an unknown `file.py:arg` or
  anything else the config file's own code raises) one line and exit 2, not a
  traceback. Pass it to `app.run(main, flags_parser=parse_flags)`. Like parse_args, it
  settles the platform first (hardware.configure): every CLI parses before jax starts."""
  hardware.configure()
  try:
    argv = configs.resolve_argv(argv)
    return flags.FLAGS(argv)
  except FileNotFoundError as e:  # the --config file, here nor in the installed package
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except flags.Error as e:
    if _WRAPPED in str(e):  # config_flags: get_config raised a ValueError / TypeError
      print(f"error: --config {_config_value(argv)}: {_last_line(str(e))}", file=sys.stderr)
    else:
      print(f"FATAL Flags parsing error: {e}", file=sys.stderr)
    sys.exit(2)
  except SyntaxError as e:  # the config file's own code
    print(f"error: --config {_config_value(argv)}: SyntaxError: {e.msg} ({e.filename}, "
          f"line {e.lineno})", file=sys.stderr)
    sys.exit(2)
  except Exception as e:  # pylint: disable=broad-except
    if not _raised_by_config_file(e, _config_value(argv)):
      if isinstance(e, (AttributeError, KeyError)):
        _unknown_key(e, argv)  # config_flags: an override of an unknown field
      raise
    print(f"error: --config {_config_value(argv)}: {type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(2)


# How config_flags wraps a ValueError / TypeError of get_config: the traceback as text.
_WRAPPED = "Error whilst parsing config file"


def _config_value(argv: Sequence[str]) -> str:
  """The --config value (path[:arg]) in argv, '' when absent."""
  for i, arg in enumerate(argv):
    if arg in ("--config", "-config") and i + 1 < len(argv):
      return argv[i + 1]
    if arg.startswith(("--config=", "-config=")):
      return arg.split("=", 1)[1]
  return ""


def _last_line(text: str) -> str:
  """The exception line that ends a formatted traceback, 'ValueError: ' dropped (the
  configs' own messages say what is wrong and what is expected)."""
  line = [l for l in text.splitlines() if l.strip()][-1].strip()
  return line[len("ValueError: "):] if line.startswith("ValueError: ") else line


def _raised_by_config_file(e: BaseException, value: str) -> bool:
  """Whether `e` came out of the config file's own code (its last frame is in the file),
  or is config_flags' note that the file defines no get_config."""
  path = value.split(":", 1)[0]
  frames = traceback.extract_tb(e.__traceback__)
  in_file = bool(frames) and bool(path) and os.path.abspath(frames[-1].filename) == (
      os.path.abspath(path))
  return in_file or (isinstance(e, AttributeError) and "'get_config'" in str(e))


def _unknown_key(e: BaseException, argv: Sequence[str]) -> None:
  """Exits 2 with one line naming the misspelled --config.x override."""
  detail = str(e).replace("\\n", " ").replace("\\'", "'").strip("'\"")
  if "' Did you mean" in detail:  # ml_collections: "name' Did you mean ..." -> quoted
    detail = "'" + detail.replace("' Did you mean", "'; did you mean", 1)
  overrides = [a for a in argv if a.startswith("--config.")]
  print(f"error: unknown config key among {overrides}: {detail}", file=sys.stderr)
  sys.exit(2)


def overwritten_input(output: Optional[str], inputs, flag: str = "--output") -> Optional[str]:
  """The message when `output` (the value of `flag`) names one of `inputs` ((what, path)
  pairs: the files the
  command reads), which writing it would destroy (translate --output = --input replaced
  the source text, visualize curves --output a workdir's metrics.jsonl); None otherwise."""
  if not output or output == "-" or not os.path.isfile(output):
    return None
  for what, path in inputs:
    if path and path != "-" and os.path.isfile(path) and os.path.samefile(output, path):
      return (f"{flag} {output} is the {what} {path}: writing it would destroy what the "
              "command reads; give another file")
  return None


def library_logs_at_warning() -> None:
  """For an absl CLI: library INFO logs (orbax writes a dozen lines per save and one per
  restore) only when the user asks with --verbosity; our progress goes to stdout."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)


def parse_args(parser: argparse.ArgumentParser,
               argv: Optional[Sequence[str]]) -> Union[argparse.Namespace, int]:
  """The parsed flags (argv None: sys.argv[1:]), or the exit status argparse asked for
  after printing usage and the error (2) or the help (0), for a `main` that returns it
  instead of exiting (the CLIs are also called from Python and from tests). The
  platform is settled first (hardware.configure), as parse_flags does."""
  hardware.configure()
  try:
    return parser.parse_args(sys.argv[1:] if argv is None else argv)
  except SystemExit as e:
    return int(e.code or 0)
