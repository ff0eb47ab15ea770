"""Draws docs/pictures/architecture.png: the rooms of bert_jax in their import layers
(tests/test_import_layers.py's LAYERS, lowest at the bottom) and the imports between rooms,
read from the code with the same scan that test runs.

  .venv/bin/python tools/architecture_picture.py [--out docs/pictures/architecture.png]
"""
from __future__ import annotations

import argparse
import collections
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import matplotlib  # noqa: E402  pylint: disable=g-import-not-at-top
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  pylint: disable=g-import-not-at-top

import test_import_layers as layering  # noqa: E402  pylint: disable=g-import-not-at-top

NOTES = {"kernels": "fused attention,\none dispatch", "layers": "plain JAX/Flax",
         "hardware": "chips; CPU tuning\n(opt-in)", "apps": "user commands"}


def room_edges() -> dict[str, set[str]]:
  edges = collections.defaultdict(set)
  for a, targets in layering.GRAPH.items():
    edges[layering.room(a)].update(layering.room(b) for b in targets
                                   if layering.room(b) != layering.room(a))
  return edges


def draw(out: str) -> None:
  rows = layering.LAYERS
  pos = {}
  for level, rooms in enumerate(rows):
    for i, room in enumerate(rooms):
      pos[room] = ((i + 1) / (len(rooms) + 1), level)
  fig, ax = plt.subplots(figsize=(9, 9))
  for a, targets in room_edges().items():
    for b in targets:
      (x0, y0), (x1, y1) = pos[a], pos[b]
      ax.annotate("", xy=(x1, y1 + 0.18), xytext=(x0, y0 - 0.18),
                  arrowprops=dict(arrowstyle="->", color="#9aa7b8", lw=0.6, alpha=0.6))
  for room, (x, y) in pos.items():
    model_code = room in ("kernels", "layers", "models")
    ax.text(x, y, room + (f"\n{NOTES[room]}" if room in NOTES else ""), ha="center",
            va="center", fontsize=9,
            bbox=dict(boxstyle="round", fc="#dbe9f6" if model_code else "#f4f4f4",
                      ec="#3b6ea5" if model_code else "#888888"))
  ax.set_xlim(0, 1)
  ax.set_ylim(-0.6, len(rows) - 0.4)
  ax.axis("off")
  ax.set_title("bert_jax: rooms by import layer (arrows: imports, always downward)")
  fig.tight_layout()
  os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
  tmp = out + ".tmp.png"
  fig.savefig(tmp, dpi=110)
  os.replace(tmp, out)
  print(out)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", default=os.path.join(ROOT, "docs", "pictures", "architecture.png"))
  draw(parser.parse_args().out)


if __name__ == "__main__":
  main()
