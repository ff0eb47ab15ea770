"""The word2vec text and binary vector formats (word2vec.c's, read by gensim's
`KeyedVectors.load_word2vec_format`).

Both start with a header line "<vocab_size> <dim>\\n". Text: one "word v_1 ... v_d\\n"
line per word. Binary: "word " then d little-endian float32 and "\\n" per word, as
word2vec.c writes it. Words are written in the given order (most frequent first), so
`restrict_vocab` keeps meaning the top-N words after a round trip.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bert_jax.tasks.word_similarity import WordVectors


def save_word2vec_format(path: str, words: Sequence[str], vectors: np.ndarray,
                         binary: bool = False) -> None:
  """Writes [V, d] vectors for words[0..V) in the word2vec text or binary format."""
  vectors = np.asarray(vectors, np.float32)
  if vectors.ndim != 2 or vectors.shape[0] != len(words):
    raise ValueError(f"{len(words)} words but vectors of shape {vectors.shape}.")
  bad = [w for w in words if not w or any(ch.isspace() for ch in w)]
  if bad:
    raise ValueError(f"word2vec formats cannot store empty words or words with spaces: {bad[:5]}")
  with open(path, "wb") as f:
    f.write(f"{vectors.shape[0]} {vectors.shape[1]}\n".encode("utf8"))
    if binary:
      little = vectors.astype("<f4")
      for w, row in zip(words, little):
        f.write(w.encode("utf8") + b" " + row.tobytes() + b"\n")
    else:
      # %.9g round-trips float32 exactly.
      for w, row in zip(words, vectors):
        f.write((w + " " + " ".join("%.9g" % x for x in row) + "\n").encode("utf8"))


def load_word2vec_format(path: str, binary: bool | None = None) -> WordVectors:
  """Reads either format (binary guessed from a `.bin` suffix when not given)."""
  if binary is None:
    binary = path.endswith(".bin")
  with open(path, "rb") as f:
    header = f.readline().decode("utf8").split()
    if len(header) != 2:
      raise ValueError(f"{path}: the first line must be '<vocab_size> <dim>', got {header}.")
    n, dim = int(header[0]), int(header[1])
    words, vectors = [], np.zeros((n, dim), np.float32)
    for i in range(n):
      if binary:
        word = bytearray()
        while (ch := f.read(1)) != b" ":
          if not ch:
            raise ValueError(f"{path}: truncated after {i} of {n} vectors.")
          if ch != b"\n":  # the newline that ends the previous vector
            word.extend(ch)
        raw = f.read(4 * dim)
        if len(raw) != 4 * dim:
          raise ValueError(f"{path}: truncated vector for {word.decode('utf8')!r}.")
        words.append(word.decode("utf8"))
        vectors[i] = np.frombuffer(raw, "<f4")
      else:
        parts = f.readline().decode("utf8").rstrip("\n").split(" ")
        if len(parts) != dim + 1:
          raise ValueError(f"{path}: line {i + 2} has {len(parts) - 1} values, expected {dim}.")
        words.append(parts[0])
        vectors[i] = np.asarray(parts[1:], np.float32)
  return WordVectors(tuple(words), vectors)
