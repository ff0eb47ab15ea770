"""The flag parser of the CLIs that take `--config` (bert_jax.main, bert_jax.aot)."""
from __future__ import annotations

import sys
from typing import Sequence

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
