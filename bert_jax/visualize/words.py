"""`visualize words`: word2vec vectors of chosen words in 2-D (PCA), labelled.

PCA by SVD of the centred [words, d] matrix; the axes are the first two principal
components with their share of the variance.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bert_jax.inference.loader import InputError
from bert_jax.visualize import plot


def pca_2d(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """[n, d] -> (coordinates [n, 2], explained variance ratio [2])."""
  x = np.asarray(vectors, np.float64)
  x = x - x.mean(axis=0, keepdims=True)
  _, s, vt = np.linalg.svd(x, full_matrices=False)
  coords = x @ vt[:2].T
  total = (s ** 2).sum()
  ratio = (s[:2] ** 2) / total if total > 0 else np.zeros(2)
  if coords.shape[1] < 2:  # a 1-D input: pad the second axis
    coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    ratio = np.pad(ratio, (0, 2 - len(ratio)))
  return coords, ratio


def draw(words: Sequence[str], coords: np.ndarray, ratio: np.ndarray, path: str) -> str:
  fig, axes = plot.subplots(1, 1, 6.4, 5.2)
  ax = axes[0, 0]
  ax.scatter(coords[:, 0], coords[:, 1], s=18)
  for w, (x, y) in zip(words, coords):
    ax.annotate(w, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=9)
  ax.set_xlabel(f"PC 1 ({ratio[0]:.0%} of variance)")
  ax.set_ylabel(f"PC 2 ({ratio[1]:.0%} of variance)")
  ax.set_title("word2vec vectors, PCA", fontsize=10)
  ax.grid(alpha=0.3)
  fig.tight_layout()
  return plot.save(fig, path)


def run(args) -> int:
  from bert_jax.word2vec.vectors import load_word2vec_format  # pylint: disable=g-import-not-at-top
  words = [w.strip() for w in args.words.split(",") if w.strip()]
  if len(words) < 2:
    raise InputError("--words needs at least two comma-separated words")
  try:
    wv = load_word2vec_format(args.vectors)
  except (OSError, ValueError) as e:
    raise InputError(f"cannot read --vectors {args.vectors}: {e}") from None
  missing = [w for w in words if w not in wv.index]
  if missing:
    raise InputError(f"not in the vocabulary of {args.vectors}: {', '.join(missing)}")
  coords, ratio = pca_2d(wv.vectors[[wv.index[w] for w in words]])
  for w, (x, y) in zip(words, coords):
    print(f"{w}\t{x:.4f}\t{y:.4f}")
  print(f"wrote {draw(words, coords, ratio, args.output)}")
  return 0
