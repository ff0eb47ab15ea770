"""Word vectors: export (word2vec.c formats), queries, similarity / analogy benchmarks.

`WordVectors` answers cosine nearest neighbours and 3CosAdd analogies (gensim's
`most_similar`). `evaluate_word_pairs` (WordSim-353, SimLex-999: Spearman, OOV pairs
skipped and counted) and `evaluate_word_analogies` (Google analogies: accuracy of
3CosAdd over the top `restrict_vocab` words, case-insensitive, questions with OOV words
skipped) follow gensim's `KeyedVectors.evaluate_word_pairs` / `evaluate_word_analogies`
rule for rule; tests check that they give gensim's numbers on the same vectors. The
benchmark files are the ones gensim ships in its test data.

The export formats are word2vec.c's, read by gensim's `KeyedVectors.load_word2vec_format`.
Both start with a header line "<vocab_size> <dim>\\n". Text: one "word v_1 ... v_d\\n"
line per word. Binary: "word " then d little-endian float32 and "\\n" per word, as
word2vec.c writes it. Words are written in the given order (most frequent first), so
`restrict_vocab` keeps meaning the top-N words after a round trip.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Sequence

import numpy as np
from scipy import stats

from bert_jax.runtime import paths as path_lib
from bert_jax.word2vec.data import gensim_test_file

BENCHMARKS = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt",
              "analogy": "questions-words.txt"}


@dataclasses.dataclass(frozen=True)
class WordVectors:
  """words[i] has vectors[i]; order matters for restrict_vocab (most frequent first)."""
  words: tuple[str, ...]
  vectors: np.ndarray  # [V, d] float32

  @functools.cached_property
  def index(self) -> dict[str, int]:
    return {w: i for i, w in enumerate(self.words)}

  @functools.cached_property
  def norms(self) -> np.ndarray:
    return np.linalg.norm(self.vectors, axis=1)  # [V]

  @functools.cached_property
  def unit(self) -> np.ndarray:
    """Row-normalised vectors [V, d] (all-zero rows stay zero)."""
    return self.vectors / np.where(self.norms == 0, 1, self.norms)[:, None]

  def similarity(self, a: str, b: str) -> float:
    return float(self.unit[self.index[a]] @ self.unit[self.index[b]])

  def most_similar(self, positive: Sequence[str] = (), negative: Sequence[str] = (),
                   topn: int = 10, restrict_vocab: int | None = None) -> list[tuple[str, float]]:
    """gensim's most_similar: cosine to the normalised mean of +unit(positive) and
    -unit(negative) vectors over the first `restrict_vocab` words, the query words
    excluded. `most_similar([king, woman], [man])` is 3CosAdd king - man + woman."""
    keys = list(positive) + list(negative)
    missing = [k for k in keys if k not in self.index]
    if missing:
      raise KeyError(f"not in the vocabulary: {missing}")
    if not keys:
      raise ValueError("most_similar needs at least one word.")
    sign = np.array([1.0] * len(positive) + [-1.0] * len(negative))
    mean = sign @ self.unit[[self.index[k] for k in keys]] / len(keys)   # [d]
    mean /= max(np.linalg.norm(mean), 1e-30)
    end = len(self.words) if restrict_vocab is None else restrict_vocab
    dists = self.unit[:end] @ mean.astype(np.float32)                    # [end]
    skip = {self.index[k] for k in keys}
    best = np.argsort(-dists)[:topn + len(skip)]
    return [(self.words[i], float(dists[i])) for i in best if i not in skip][:topn]

  def neighbors(self, word: str, topn: int = 10) -> list[tuple[str, float]]:
    return self.most_similar([word], topn=topn)

  def analogy(self, a: str, b: str, c: str, topn: int = 10) -> list[tuple[str, float]]:
    """a - b + c (`king,man,woman` -> queen): most_similar([a, c], [b])."""
    return self.most_similar([a, c], [b], topn=topn)


def _ok_vocab(wv: WordVectors, restrict_vocab: int, case_insensitive: bool) -> dict[str, int]:
  """Benchmark word -> row over the first restrict_vocab words. Case-insensitively the
  most frequent case variant wins (gensim builds the dict over the reversed list)."""
  fold = str.upper if case_insensitive else (lambda w: w)
  return {fold(w): i for i, w in reversed(list(enumerate(wv.words[:restrict_vocab])))}


def evaluate_word_pairs(wv: WordVectors, path: str, delimiter: str = "\t",
                        restrict_vocab: int = 300000, case_insensitive: bool = True) -> dict:
  """Spearman/Pearson of cosine against human scores; pairs with an OOV word skipped."""
  ok = _ok_vocab(wv, restrict_vocab, case_insensitive)
  gold, model, oov = [], [], 0
  with open(path, encoding="utf8") as f:
    for line in f:
      if not line or line.startswith("#"):
        continue
      try:
        a, b, sim = [x.upper() if case_insensitive else x for x in line.split(delimiter)]
        sim = float(sim)
      except (ValueError, TypeError):
        continue  # gensim skips malformed lines too
      if a not in ok or b not in ok:
        oov += 1
        continue
      gold.append(sim)
      model.append(float(wv.unit[ok[a]] @ wv.unit[ok[b]]))
  if not gold:
    raise ValueError(f"no pair of {path} is in the vocabulary ({oov} OOV pairs).")
  return dict(spearman=float(stats.spearmanr(gold, model)[0]),
              pearson=float(stats.pearsonr(gold, model)[0]),
              pairs=len(gold), oov=oov, oov_ratio=100.0 * oov / (len(gold) + oov))


def evaluate_word_analogies(wv: WordVectors, path: str, restrict_vocab: int = 300000,
                            case_insensitive: bool = True, block: int = 1024) -> dict:
  """Accuracy of 3CosAdd (b - a + c) over the first restrict_vocab words, as gensim.

  gensim takes the 5 nearest words to the normalised mean of unit(b) + unit(c) - unit(a)
  (a, b, c themselves removed) and predicts the first one whose case-folded form is not
  a, b or c. Questions are scored here in blocks of `block` with one matrix product.
  """
  fold = str.upper if case_insensitive else (lambda w: w)
  ok = _ok_vocab(wv, restrict_vocab, case_insensitive)
  sections, questions, total, oov = [], [], 0, 0   # questions: (section, a, b, c, expected)
  with open(path, "rb") as f:
    for line in f:
      line = line.decode("utf8")
      if line.startswith(": "):
        sections.append(line.lstrip(": ").strip())
        continue
      if not sections:
        raise ValueError(f"{path}: a question comes before the first ': section' line.")
      words = [fold(w) for w in line.split()]
      if len(words) != 4:
        continue
      total += 1
      if any(w not in ok for w in words):
        oov += 1
        continue
      questions.append((len(sections) - 1, *words))
  end = min(restrict_vocab, len(wv.words))
  unit, vectors, norms = wv.unit, wv.vectors[:end], wv.norms[:end]
  correct = np.zeros(len(questions), bool)
  for start in range(0, len(questions), block):
    qs = questions[start:start + block]
    ia, ib, ic = (np.array([ok[q[i]] for q in qs]) for i in (1, 2, 3))
    mean = (unit[ib] + unit[ic] - unit[ia]) / 3                       # [q, d]
    mean /= np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-30)
    # gensim's arithmetic (vectors . mean / norms), then questions-major for the top-k.
    dists = np.ascontiguousarray(((vectors @ mean.T.astype(np.float32)) / norms[:, None]).T)
    top = min(8, end)                                                # 5 + the 3 query words
    cand = np.argpartition(-dists, top - 1, axis=1)[:, :top]         # [q, 8] unordered
    order = np.argsort(-np.take_along_axis(dists, cand, 1), axis=1)
    cand = np.take_along_axis(cand, order, 1)                        # [q, 8] best first
    for j, (q, row) in enumerate(zip(qs, cand)):
      _, a, b, c, expected = q
      keys = {ok[a], ok[b], ok[c]}
      predicted = None
      for i in [i for i in row if i not in keys][:5]:
        predicted = fold(wv.words[i])
        if predicted in ok and predicted not in (a, b, c):
          break
      correct[start + j] = predicted == expected
  per_section = {}
  for s, name in enumerate(sections):
    hits = [bool(correct[i]) for i, q in enumerate(questions) if q[0] == s]
    per_section[name] = (sum(hits), len(hits))
  n = len(questions)
  return dict(accuracy=float(correct.mean()) if n else 0.0, correct=int(correct.sum()),
              questions=n, oov=oov, oov_ratio=100.0 * oov / max(total, 1),
              sections=per_section)


def evaluate_all(wv: WordVectors, restrict_vocab: int = 300000) -> dict[str, float]:
  """The three headline numbers (and OOV counts) on gensim's shipped benchmarks."""
  out = {}
  for name in ("wordsim353", "simlex999"):
    try:
      r = evaluate_word_pairs(wv, gensim_test_file(BENCHMARKS[name]), restrict_vocab=restrict_vocab)
    except ValueError:  # no pair in the vocabulary (a toy corpus): report, don't fail
      r = dict(spearman=float("nan"), pairs=0, oov=-1)
    out.update({f"{name}_spearman": r["spearman"], f"{name}_pairs": r["pairs"],
                f"{name}_oov": r["oov"]})
  r = evaluate_word_analogies(wv, gensim_test_file(BENCHMARKS["analogy"]), restrict_vocab)
  out.update({"analogy_accuracy": r["accuracy"], "analogy_questions": r["questions"],
              "analogy_oov": r["oov"]})
  return out


# ------------------------------------------------------------------ export
def save_word2vec_format(path: str, words: Sequence[str], vectors: np.ndarray,
                         binary: bool = False) -> None:
  """Writes [V, d] vectors for words[0..V) in the word2vec text or binary format."""
  vectors = np.asarray(vectors, np.float32)
  if vectors.ndim != 2 or vectors.shape[0] != len(words):
    raise ValueError(f"{len(words)} words but vectors of shape {vectors.shape}.")
  bad = [w for w in words if not w or any(ch.isspace() for ch in w)]
  if bad:
    raise ValueError(f"word2vec formats cannot store empty words or words with spaces: {bad[:5]}")
  # Local or gs://; whole or not at all (a killed rerun keeps the finished run's file).
  with path_lib.open_atomically(path) as f:
    f.write(f"{vectors.shape[0]} {vectors.shape[1]}\n".encode("utf8"))
    if binary:
      little = vectors.astype("<f4")
      for w, row in zip(words, little):
        f.write(w.encode("utf8") + b" " + row.tobytes() + b"\n")
    else:
      # %.9g round-trips float32 exactly.
      for w, row in zip(words, vectors):
        f.write((w + " " + " ".join("%.9g" % x for x in row) + "\n").encode("utf8"))


def is_binary(path: str, binary: bool | None = None) -> bool:
  """The format load_word2vec_format reads: `binary` if given, else a `.bin` suffix."""
  return path.endswith(".bin") if binary is None else binary


def load_word2vec_format(path: str, binary: bool | None = None) -> WordVectors:
  """Reads either format (binary guessed from a `.bin` suffix when not given)."""
  binary = is_binary(path, binary)
  with path_lib.resolve(path).open("rb") as f:  # local or gs://
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


def export_vectors(workdir: str, words, vectors: np.ndarray, formats: str) -> list[str]:
  """Writes vectors.txt and/or vectors.bin (formats: text | binary | both | none)."""
  paths = []
  for fmt, name in (("text", "vectors.txt"), ("binary", "vectors.bin")):
    if formats in (fmt, "both"):
      path = os.path.join(workdir, name)  # a gs:// workdir too: save_* go through epath
      save_word2vec_format(path, words, vectors, binary=fmt == "binary")
      paths.append(path)
  if formats != "none":  # + the TensorBoard projector files (word2vec/projector.py)
    from bert_jax.word2vec.projector import write_projector  # pylint: disable=g-import-not-at-top
    paths += write_projector(workdir, words, vectors)
  return paths
