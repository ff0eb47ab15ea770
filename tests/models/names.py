"""A check every model test uses: each param carries one logical axis name per dim."""
import flax.linen as nn
import jax


def assert_every_param_named(params) -> None:
  """params: an (abstract) boxed params tree, e.g. from jax.eval_shape(model.init)."""
  leaves = jax.tree_util.tree_leaves_with_path(
      params, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))
  assert leaves
  for path, leaf in leaves:
    assert isinstance(leaf, nn.LogicallyPartitioned), f"{jax.tree_util.keystr(path)} has no names"
    assert len(leaf.names) == leaf.value.ndim, jax.tree_util.keystr(path)
    assert all(isinstance(n, str) for n in leaf.names), jax.tree_util.keystr(path)
