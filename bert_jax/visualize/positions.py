"""`visualize positions`: a positional encoding as a (positions x dimensions) heatmap, beside
the position-by-position dot products that show what it encodes.

  sinusoidal  PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani et
              al. 2017, 3.5). PE(p) . PE(q) depends only on p - q: constant diagonals.
  learned     a checkpoint's position table (BERT / GPT), its dot products.
  rotary      an all-ones vector rotated to each position (Su et al. 2021, our
              apply_rotary); <R(m)x, R(n)x> again depends only on m - n.
  relative    T5's bucket of (key - query) for each pair, or with --checkpoint the learned
              bias (mean over heads) that attention adds for that pair.
"""
from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import numpy as np

from bert_jax.inference.loader import InputError, Loaded
from bert_jax.layers import positional
from bert_jax.layers.config import TransformerConfig
from bert_jax.visualize import plot

KINDS = ("sinusoidal", "learned", "rotary", "relative")


def _find(tree: dict, name: str) -> Optional[np.ndarray]:
  """The first leaf under a key `name` (depth-first), e.g. position_embedder/embedding."""
  for key, value in tree.items():
    if key == name:
      return value
    if isinstance(value, dict):
      found = _find(value, name)
      if found is not None:
        return found
  return None


def encoding(kind: str, d_model: int, length: int, model: Optional[Loaded] = None,
             ) -> tuple[np.ndarray, np.ndarray, str]:
  """(matrix [length, d] or [length, length] for relative, similarity [length, length],
  a caption)."""
  if kind == "sinusoidal":
    table = positional.sinusoidal_table(length, d_model)               # [length, d]
    return table, table @ table.T, f"sinusoidal, d_model={d_model}"
  if kind == "rotary":
    if d_model % 2:
      raise InputError(f"rotary encodings need an even --d_model, got {d_model}")
    ones = jnp.ones((1, length, 1, d_model), jnp.float32)
    rotated = positional.apply_rotary(ones, jnp.arange(length)[None])
    table = np.asarray(rotated[0, :, 0])                                # [length, d]
    return table, table @ table.T, f"rotary (all-ones vector rotated), d={d_model}"
  if kind == "learned":
    if model is None:
      raise InputError("--kind learned needs --checkpoint (a BERT or GPT with a learned "
                       "position table)")
    table = _find(model.params, "position_embedder")   # .../embedding/embedding (nn.Embed)
    while isinstance(table, dict):
      table = _find(table, "embedding")
    if table is None:
      raise InputError(f"--checkpoint {model.source} has no learned position table "
                       f"(its position kind is {model.config.position!r})")
    if length > table.shape[0]:
      raise InputError(f"--length {length} exceeds the checkpoint's {table.shape[0]} positions")
    table = np.asarray(table[:length], np.float32)
    return table, table @ table.T, f"learned positions of {model.source}"
  if kind == "relative":
    if model is None:
      cfg = TransformerConfig()
      q, k = np.arange(length)[:, None], np.arange(length)[None, :]
      buckets = np.asarray(positional.relative_position_bucket(
          jnp.asarray(k - q), True, cfg.relative_num_buckets, cfg.relative_max_distance))
      return buckets, buckets, f"T5 buckets of key - query ({cfg.relative_num_buckets} buckets)"
    table = _find(model.params, "rel_embedding")
    if table is None:
      raise InputError(f"--checkpoint {model.source} has no relative position bias")
    cfg = model.config
    q, k = np.arange(length)[:, None], np.arange(length)[None, :]
    buckets = np.asarray(positional.relative_position_bucket(
        jnp.asarray(k - q), True, cfg.relative_num_buckets, cfg.relative_max_distance))
    bias = np.asarray(table, np.float32)[buckets].mean(-1)              # [length, length]
    return bias, bias, "learned relative bias (mean of heads)"
  raise InputError(f"--kind {kind}: expected one of {', '.join(KINDS)}")


def draw(matrix: np.ndarray, similarity: np.ndarray, kind: str, caption: str, path: str) -> str:
  fig, axes = plot.subplots(1, 2, 11, 4.6)
  left, right = axes[0]
  cmap = "RdBu_r" if kind != "relative" else "viridis"
  image = plot.heatmap(left, matrix, cmap=cmap, title=caption)
  left.set_xlabel("key position" if kind == "relative" else "dimension")
  left.set_ylabel("position" if kind != "relative" else "query position")
  fig.colorbar(image, ax=left, fraction=0.046, pad=0.04)
  if kind == "relative":
    right.plot(np.arange(matrix.shape[1]), matrix[matrix.shape[0] // 2])
    right.set_title(f"row {matrix.shape[0] // 2}: value by key position", fontsize=9)
    right.set_xlabel("key position")
  else:
    image = plot.heatmap(right, similarity, cmap="viridis",
                         title="PE(p) . PE(q): constant along diagonals = relative position"
                         if kind != "learned" else "PE(p) . PE(q)")
    right.set_xlabel("position q")
    right.set_ylabel("position p")
    fig.colorbar(image, ax=right, fraction=0.046, pad=0.04)
  fig.tight_layout()
  return plot.save(fig, path)


def run(args, model: Optional[Loaded]) -> int:
  if args.d_model < 1 or args.length < 1:
    raise InputError(f"--d_model and --length must be >= 1, got {args.d_model}, {args.length}")
  matrix, similarity, caption = encoding(args.kind, args.d_model, args.length, model)
  print(f"{caption}: matrix {list(matrix.shape)}")
  print(f"wrote {draw(matrix, similarity, args.kind, caption, args.output)}")
  if args.save_matrix:
    np.save(args.save_matrix, matrix)
    print(f"wrote {args.save_matrix}")
  return 0
