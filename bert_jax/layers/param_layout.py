"""Params between layouts, so checkpoints, imported weights and exports move freely: a
stack scanned (one `layers` entry whose leaves have a leading [num_layers] axis) or
unrolled (`layers_0 ... layers_{N-1}`), and token tables padded to padded_vocab rows."""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np


_LAYER_KEY = re.compile(r"^layers_(\d+)$")


def scan_to_unrolled(tree: dict) -> dict:
  """Rewrites every `layers: {...[L, ...]}` subtree as `layers_0 ... layers_{L-1}`."""
  out = {}
  for k, v in tree.items():
    if k == "layers" and isinstance(v, dict):
      leaves = jax.tree_util.tree_leaves(v)
      n = leaves[0].shape[0]
      for i in range(n):
        out[f"layers_{i}"] = jax.tree_util.tree_map(lambda a, i=i: a[i], v)
    elif isinstance(v, dict):
      out[k] = scan_to_unrolled(v)
    else:
      out[k] = v
  return out


def unrolled_to_scan(tree: dict) -> dict:
  """Inverse of scan_to_unrolled: stacks `layers_i` subtrees under `layers`."""
  out, layers = {}, {}
  for k, v in tree.items():
    m = _LAYER_KEY.match(k)
    if m and isinstance(v, dict):
      layers[int(m.group(1))] = v
    elif isinstance(v, dict):
      out[k] = unrolled_to_scan(v)
    else:
      out[k] = v
  if layers:
    ordered = [layers[i] for i in range(len(layers))]
    out["layers"] = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *ordered)
  return out


def pad_rows(x, rows: int):
  """x (numpy) with zero rows appended up to `rows`: a vocabulary table or output bias
  of vocab_size rows (an HF model, a checkpoint saved unpadded) for a padded model. The
  padding rows are never an input id and vocab_logits cuts theirs off, so the padded
  model computes exactly what the unpadded one did."""
  x = np.asarray(x)
  if x.shape[0] >= rows:
    return x
  return np.concatenate([x, np.zeros((rows - x.shape[0],) + x.shape[1:], x.dtype)])
