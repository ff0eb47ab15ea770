"""word2vec vectors for the TensorBoard embedding projector.

Writes, next to the word2vec export: projector/vectors.tsv (one tab-separated row of
floats per word), projector/metadata.tsv (one word per line, same order; a single column
has no header line, as the projector expects) and projector/projector_config.pbtxt
pointing at both, so `tensorboard --logdir WORKDIR/projector` shows the words in 3-D
(PCA / t-SNE / UMAP) with their labels.
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

_CONFIG = """embeddings {
  tensor_name: "word2vec"
  tensor_path: "vectors.tsv"
  metadata_path: "metadata.tsv"
}
"""


def write_projector(workdir: str, words: Sequence[str], vectors: np.ndarray) -> list[str]:
  """Returns the three written paths (under workdir/projector/)."""
  vectors = np.asarray(vectors, np.float32)
  if vectors.ndim != 2 or vectors.shape[0] != len(words):
    raise ValueError(f"{len(words)} words but vectors of shape {vectors.shape}.")
  bad = [w for w in words if not w or "\t" in w or "\n" in w]
  if bad:
    raise ValueError(f"the projector's metadata.tsv cannot hold words {bad[:5]}")
  out = os.path.join(workdir, "projector")
  os.makedirs(out, exist_ok=True)
  paths = [os.path.join(out, n) for n in ("vectors.tsv", "metadata.tsv",
                                           "projector_config.pbtxt")]
  # %.9g round-trips float32 exactly.
  np.savetxt(paths[0], vectors, fmt="%.9g", delimiter="\t")
  with open(paths[1], "w", encoding="utf-8") as f:
    f.write("".join(w + "\n" for w in words))
  with open(paths[2], "w", encoding="utf-8") as f:
    f.write(_CONFIG)
  return paths
