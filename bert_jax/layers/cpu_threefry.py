"""Threefry on CPU as jax compiles it for GPU and TPU: the 20 rounds unrolled, for arrays
of random words large enough to pay for it (dropout's masks), the rolled loop for the
small ones (key derivations).

Why: jax lowers threefry2x32 on CPU as a `fori_loop` of 5 iterations (smaller HLO, a
shorter compile), and XLA:CPU runs each iteration as its own pass over the words:
`jax.random.bits` of [32, 128, 12, 128] words took 63.7 ms rolled, 6.6 ms unrolled on
this project's 2-core machine (jax 0.10.2), the same bits. Unrolled everywhere is slower,
not faster (bert_tiny's `:bert` step 22% slower): the rounds of the scalar fold_in/split
chains that derive each dropout key then become elementwise ops that XLA fuses into the
big mask loop, recomputing the key per element. So the choice is made per call, by the
number of words: below MIN_UNROLLED_WORDS the loop stays rolled (its while loop is a
fusion boundary: the key is computed once), at or above it the rounds are unrolled into
one vectorized elementwise pass. Only the lowering changes: every bit is jax's
(tests/layers/test_cpu_threefry.py); bench/RESULTS.md "Dropout's random words on CPU"
has the step times.

This uses jax's private lowering rules (jax._src.random.threefry2x32, jax 0.10.2). If a
jax release moves them, `use_unrolled` leaves jax's own CPU lowering in place and
returns False; the test above fails on such a release, so the fallback cannot go
unnoticed.
"""
from __future__ import annotations

import math

MIN_UNROLLED_WORDS = 1 << 14  # a [32, 128, 64]-word hidden-state mask is 262,144


def _rules():
  """(jax's unrolled rule, its rolled CPU rule, the primitive, mlir), or None."""
  try:
    from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
    from jax._src.random import threefry2x32 as tf  # pylint: disable=g-import-not-at-top
    return tf._threefry2x32_lowering_rule, tf._threefry2x32_cpu_lowering_rule, \
        tf.threefry2x32_p, mlir  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return None


def use_unrolled(enabled: bool = True) -> bool:
  """Registers the per-size CPU lowering (enabled) or jax's own rolled one (not enabled)
  for threefry2x32; True when it could. Affects programs lowered afterwards."""
  rules = _rules()
  if rules is None:
    return False
  unrolled, rolled, primitive, mlir = rules

  def by_size(ctx, key1, key2, x1, x2):
    words = math.prod(ctx.avals_in[2].shape)
    rule = unrolled if words >= MIN_UNROLLED_WORDS else rolled
    return rule(ctx, key1, key2, x1, x2)

  mlir.register_lowering(primitive, by_size if enabled else rolled, platform="cpu")
  return True
