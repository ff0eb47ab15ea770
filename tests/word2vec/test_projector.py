"""word2vec/projector.py: the TensorBoard projector files of word vectors."""
import numpy as np
import pytest

from bert_jax.word2vec import projector


def test_projector_files_hold_the_vectors_and_words(tmp_path):
  vocab = ["king", "queen", "man", "woman"]
  vectors = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
  tsv, meta, config = projector.write_projector(str(tmp_path), vocab, vectors)
  np.testing.assert_array_equal(np.loadtxt(tsv, delimiter="\t", dtype=np.float32), vectors)
  assert open(meta).read().splitlines() == vocab                   # one column: no header
  assert 'tensor_path: "vectors.tsv"' in open(config).read()
  with pytest.raises(ValueError, match="cannot hold"):
    projector.write_projector(str(tmp_path), ["a\tb", "c", "d", "e"], vectors)
