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

from bert_jax.runtime import paths as path_lib

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
  out = path_lib.resolve(workdir) / "projector"  # local or gs://
  out.mkdir(parents=True, exist_ok=True)
  files = [out / n for n in ("vectors.tsv", "metadata.tsv", "projector_config.pbtxt")]
  with path_lib.open_atomically(files[0]) as f:  # each file whole or the old one
    np.savetxt(f, vectors, fmt="%.9g", delimiter="\t")  # %.9g round-trips float32 exactly
  path_lib.write_atomically(files[1], "".join(w + "\n" for w in words))
  path_lib.write_atomically(files[2], _CONFIG)
  return [os.fspath(f) for f in files]
