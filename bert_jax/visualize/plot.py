"""Shared matplotlib helpers (Agg backend: files only, no display)."""
from __future__ import annotations

import os
from typing import Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

DPI = 100


def heatmap(ax, matrix: np.ndarray, rows: Optional[Sequence[str]] = None,
            cols: Optional[Sequence[str]] = None, *, annotate: bool = False, cmap="viridis",
            vmin=None, vmax=None, title: str = ""):
  """matrix [r, c] as an image; token labels on the axes; values written in each cell when
  `annotate` (readable up to ~16 x 16)."""
  image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto",
                    interpolation="nearest")
  if rows is not None:
    ax.set_yticks(range(len(rows)), labels=rows, fontsize=8)
  if cols is not None:
    ax.set_xticks(range(len(cols)), labels=cols, fontsize=8, rotation=60, ha="right",
                  rotation_mode="anchor")
  if annotate:
    # Dark text on the bright upper half of the colour scale, white on the dark half.
    lo, hi = image.norm.vmin, image.norm.vmax
    for (i, j), v in np.ndenumerate(matrix):
      bright = hi <= lo or (v - lo) / (hi - lo) > 0.5
      ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
              color="black" if bright else "white")
  if title:
    ax.set_title(title, fontsize=9)
  return image


def figure(width_in: float, height_in: float):
  return plt.figure(figsize=(width_in, height_in), dpi=DPI)


def subplots(rows: int, cols: int, width_in: float, height_in: float, **kw):
  return plt.subplots(rows, cols, figsize=(width_in, height_in), dpi=DPI, squeeze=False, **kw)


def save(fig, path: str) -> str:
  """Writes the figure as PNG at exactly figsize * DPI pixels (no bbox cropping)."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=DPI, format="png")
  plt.close(fig)
  return path
