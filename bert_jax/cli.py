"""The flag parsers of the CLIs: absl's for those that take `--config` (bert_jax.main,
bert_jax.aot), argparse's for those whose `main` returns an exit status."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence, Union

from absl import flags

from bert_jax import configs


def parse_flags(argv: Sequence[str]) -> list[str]:
  """absl's parser for a CLI taking --config: the file resolved (configs.resolve), any error
  (a missing file, a bad flag, a misspelled --config.key) one line and exit 2, not a
  traceback. Pass it to `app.run(main, flags_parser=parse_flags)`."""
  try:
    return flags.FLAGS(configs.resolve_argv(argv))
  except FileNotFoundError as e:  # the --config file, here nor in the installed package
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
  except flags.Error as e:
    print(f"FATAL Flags parsing error: {e}", file=sys.stderr)
    sys.exit(2)
  except (AttributeError, KeyError) as e:  # config_flags: an override of an unknown field
    detail = str(e).replace("\\n", " ").replace("\\'", "'").strip("'\"")
    if "' Did you mean" in detail:  # ml_collections: "name' Did you mean ..." -> quoted
      detail = "'" + detail.replace("' Did you mean", "'; did you mean", 1)
    overrides = [a for a in argv if a.startswith("--config.")]
    print(f"error: unknown config key among {overrides}: {detail}", file=sys.stderr)
    sys.exit(2)


def parse_args(parser: argparse.ArgumentParser,
               argv: Optional[Sequence[str]]) -> Union[argparse.Namespace, int]:
  """The parsed flags (argv None: sys.argv[1:]), or the exit status argparse asked for
  after printing usage and the error (2) or the help (0), for a `main` that returns it
  instead of exiting (the CLIs are also called from Python and from tests)."""
  try:
    return parser.parse_args(sys.argv[1:] if argv is None else argv)
  except SystemExit as e:
    return int(e.code or 0)
