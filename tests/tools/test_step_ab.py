"""tools/step_ab.py's baseline: a module as a commit had it, loaded beside today's (no
timings)."""
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "tools"),
                os.path.join(_ROOT, "bench"),
                os.path.join(_ROOT, "bench", "time_to_quality")]
import bench_util  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import step_ab  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

from bert_jax.train import losses  # noqa: E402


def _first_commit_with(path):
  out = subprocess.run(["git", "-C", bench_util.ROOT, "log", "--format=%H", "--", path],
                       capture_output=True, text=True, check=False).stdout.split()
  return out[-1] if out else None


def test_module_at_loads_the_commits_source_beside_todays():
  first = _first_commit_with("bert_jax/train/losses.py")
  if first is None:
    pytest.skip("not a git checkout with history")
  old = step_ab.module_at(first, "bert_jax.train.losses")
  assert old.softmax_cross_entropy is not losses.softmax_cross_entropy
  logits = jnp.asarray(np.random.default_rng(0).normal(size=(4, 7)), jnp.float32)
  labels = jnp.asarray([0, 3, 6, 2])
  np.testing.assert_allclose(old.softmax_cross_entropy(logits, labels),
                             losses.softmax_cross_entropy(logits, labels), rtol=1e-6)
  with pytest.raises(bench_util.BenchError, match="no_such_commit"):
    step_ab.module_at("no_such_commit", "bert_jax.train.losses")


def test_module_at_loads_a_module_defining_flax_modules():
  # Flax modules are dataclasses, which look their defining module up in sys.modules
  # while the class is built: the baseline of a layers/ change must load too.
  first = _first_commit_with("bert_jax/layers/dropout.py")
  if first is None:
    pytest.skip("not a git checkout with history")
  old = step_ab.module_at(first, "bert_jax.layers.dropout")
  assert old.Dropout(rate=0.1).rate == 0.1


def test_install_reaches_modules_that_imported_the_function_by_name():
  from bert_jax.layers import blocks, norm  # blocks: `from ...norm import layer_norm`
  original = norm.layer_norm
  def baseline(cfg, name):
    return original(cfg, name)
  try:
    step_ab.install(norm, "layer_norm", baseline, (baseline, original))
    assert norm.layer_norm is baseline and blocks.layer_norm is baseline
    step_ab.install(norm, "layer_norm", original, (baseline, original))
    assert norm.layer_norm is original and blocks.layer_norm is original
  finally:
    norm.layer_norm = blocks.layer_norm = original
