"""layers/cpu_threefry.py: threefry's CPU lowering chosen by size gives jax's own bits,
and is in effect on the pinned jax (importing layers/dropout.py registers it)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.layers import cpu_threefry
from bert_jax.layers import dropout as dropout_lib


def _bits_and_hlo(shape):
  fn = jax.jit(lambda k: jax.random.bits(jax.random.fold_in(k, 7), shape, jnp.uint32))
  key = jax.random.key(11)
  return np.asarray(fn(key)), fn.lower(key).compile().as_text()


@pytest.mark.parametrize("shape", [(3, 5), (8, 128, 64), (4099,)])
def test_same_bits_rolled_and_by_size_and_large_draws_lose_the_loop(shape):
  assert dropout_lib.UNROLLED_ON_CPU, "jax moved its threefry lowering rules: update layers/cpu_threefry.py"
  try:
    by_size, hlo = _bits_and_hlo(shape)
    assert cpu_threefry.use_unrolled(False)
    rolled, rolled_hlo = _bits_and_hlo(shape)
  finally:
    cpu_threefry.use_unrolled(True)
  np.testing.assert_array_equal(by_size, rolled)
  assert " while(" in rolled_hlo  # jax's CPU default: the 5-iteration loop
  large = int(np.prod(shape)) >= cpu_threefry.MIN_UNROLLED_WORDS
  # The fold_in's key derivation keeps its loop at every size; a large draw has none.
  assert hlo.count(" while(") == rolled_hlo.count(" while(") - (1 if large else 0)
