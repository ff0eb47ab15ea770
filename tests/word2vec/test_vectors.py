"""word2vec evaluation, export and queries give gensim's answers on the same vectors."""
import os
import subprocess
import sys

import numpy as np
import pytest
from gensim.models import KeyedVectors

from bert_jax.word2vec.data import gensim_test_file
from bert_jax.word2vec import vectors as ws
from bert_jax.word2vec.vectors import load_word2vec_format, save_word2vec_format
from bert_jax.word2vec.query import run_queries


@pytest.fixture(scope="module")
def planted():
  """Vectors over the benchmarks' words with planted analogy offsets, plus case variants.

  Each analogy section gets an offset r: vec(b) = vec(a) + r + noise for its pairs (a, b),
  so 3CosAdd is right on part of the questions and wrong on the rest. "ATHENS" comes
  before "athens" (the upper-case variant wins case-insensitively) and "Paris" after
  "paris"; the benchmarks' own spelling is mixed case.
  """
  rng = np.random.default_rng(0)
  words, pairs = {}, {}
  section = None
  with open(gensim_test_file("questions-words.txt"), encoding="utf8") as f:
    for line in f:
      if line.startswith(":"):
        section = line.strip()
        continue
      a, b, c, d = line.lower().split()
      pairs.setdefault(section, set()).update([(a, b), (c, d)])
      for w in (a, b, c, d):
        words.setdefault(w, None)
  for name in ("wordsim353.tsv", "simlex999.txt"):
    with open(gensim_test_file(name), encoding="utf8") as f:
      for line in f:
        if not line.startswith("#"):
          for w in line.lower().split("\t")[:2]:
            words.setdefault(w, None)
  words = list(words)
  dim = 24
  vec = {w: rng.normal(size=dim) for w in words}
  for section, section_pairs in pairs.items():
    offset = rng.normal(size=dim) * 1.5
    for a, b in sorted(section_pairs):
      vec[b] = vec[a] + offset + rng.normal(size=dim) * 0.6
  order = list(rng.permutation(words))
  order.insert(order.index("athens"), "ATHENS")
  order.insert(order.index("paris") + 1, "Paris")
  vec["ATHENS"], vec["Paris"] = rng.normal(size=dim), rng.normal(size=dim)
  vectors = np.stack([vec[w] for w in order]).astype(np.float32)
  kv = KeyedVectors(dim)
  kv.add_vectors(order, vectors)
  return ws.WordVectors(tuple(order), vectors), kv


@pytest.mark.parametrize("name", ["wordsim353.tsv", "simlex999.txt"])
@pytest.mark.parametrize("restrict", [300000, 900])
def test_word_pairs_equal_gensim(planted, name, restrict):
  wv, kv = planted
  path = gensim_test_file(name)
  pearson, spearman, oov_ratio = kv.evaluate_word_pairs(path, restrict_vocab=restrict)
  ours = ws.evaluate_word_pairs(wv, path, restrict_vocab=restrict)
  assert ours["spearman"] == pytest.approx(spearman.statistic, abs=1e-9)
  assert ours["pearson"] == pytest.approx(pearson.statistic, abs=1e-6)
  assert ours["oov_ratio"] == pytest.approx(oov_ratio, abs=1e-9)
  if restrict == 900:
    assert ours["oov"] > 0


def test_analogies_equal_gensim(planted, tmp_path):
  wv, kv = planted
  # Every 4th question of each section (gensim's evaluator is slow), a malformed line.
  path = str(tmp_path / "questions.txt")
  with open(gensim_test_file("questions-words.txt"), encoding="utf8") as f, \
      open(path, "w", encoding="utf8") as out:
    for i, line in enumerate(f):
      if line.startswith(":") or i % 4 == 0:
        out.write(line)
    out.write("only three words\n")
  for restrict in (300000, 600):
    score, sections = kv.evaluate_word_analogies(path, restrict_vocab=restrict)
    ours = ws.evaluate_word_analogies(wv, path, restrict_vocab=restrict)
    assert ours["accuracy"] == pytest.approx(score, abs=1e-12)
    assert ours["correct"] == len(sections[-1]["correct"])
    assert {s["section"]: (len(s["correct"]), len(s["correct"]) + len(s["incorrect"]))
            for s in sections[:-1]} == ours["sections"]
  full = ws.evaluate_word_analogies(wv, gensim_test_file("questions-words.txt"))
  print(f"planted analogy accuracy {full['accuracy']:.3f} over {full['questions']} questions")
  assert 0.2 < full["accuracy"] < 0.95 and full["oov"] == 0 and full["questions"] == 19544


def test_most_similar_and_queries_equal_gensim(planted):
  wv, kv = planted
  for positive, negative in ((["king"], []), (["king", "woman"], ["man"]),
                             (["athens", "japan"], ["greece"])):
    ours = wv.most_similar(positive, negative, topn=8)
    theirs = kv.most_similar(positive=positive, negative=negative, topn=8)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)
  assert wv.analogy("king", "man", "woman", 3) == wv.most_similar(["king", "woman"], ["man"], 3)
  blocks = run_queries(wv, neighbors=["king", "nosuchword"], analogies=["king,man,woman", "a,b"],
                       topn=2)
  assert blocks[0].splitlines()[0] == "neighbors of king:" and len(blocks[0].splitlines()) == 3
  assert blocks[1] == "error: not in the vocabulary: ['nosuchword']"
  assert blocks[2].startswith("king - man + woman:")
  assert blocks[3].startswith("error: --analogy takes three words")


@pytest.mark.parametrize("binary", [False, True])
def test_export_round_trip_with_gensim(planted, tmp_path, binary):
  wv, _ = planted
  path = str(tmp_path / ("v.bin" if binary else "v.txt"))
  save_word2vec_format(path, wv.words, wv.vectors, binary=binary)
  kv = KeyedVectors.load_word2vec_format(path, binary=binary)
  assert list(kv.index_to_key) == list(wv.words)
  np.testing.assert_array_equal(kv.vectors, wv.vectors)     # float32 exactly, both formats
  # And gensim's own files read back by ours.
  theirs = str(tmp_path / ("g.bin" if binary else "g.txt"))
  kv.save_word2vec_format(theirs, binary=binary)
  back = load_word2vec_format(theirs, binary=binary)
  assert back.words == wv.words
  np.testing.assert_allclose(back.vectors, wv.vectors, rtol=1e-6)
  with pytest.raises(ValueError, match="spaces"):
    save_word2vec_format(path, ["a b"], np.zeros((1, 2)))


def test_query_cli(planted, tmp_path):
  wv, _ = planted
  path = str(tmp_path / "v.bin")
  save_word2vec_format(path, wv.words, wv.vectors, binary=True)
  run = subprocess.run(
      [sys.executable, "-m", "bert_jax.word2vec.query", "--vectors", path, "--neighbors",
       "king", "--analogy", "king,man,woman", "--topn", "3"],
      capture_output=True, text=True, check=True,
      cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  lines = run.stdout.splitlines()
  top = wv.analogy("king", "man", "woman", topn=3)
  assert lines[0] == f"{len(wv.words)} vectors of dimension 24 from {path}"
  assert "king - man + woman:" in lines
  assert lines[lines.index("king - man + woman:") + 1].split()[0] == top[0][0]


def test_query_cli_unreadable_vectors_is_one_line_exit_2(planted, tmp_path):
  """A missing or cut-short --vectors file: one 'error:' line naming it (was a traceback)."""
  wv, _ = planted
  path = str(tmp_path / "v.bin")
  save_word2vec_format(path, wv.words, wv.vectors, binary=True)
  cut = str(tmp_path / "cut.bin")
  with open(path, "rb") as f, open(cut, "wb") as g:
    g.write(f.read(200))  # the header and part of the first vectors
  for vectors, expected in [
      (str(tmp_path / "nope.bin"), f"error: --vectors {tmp_path}/nope.bin does not exist"),
      (cut, f"error: --vectors {cut} is not a readable word2vec binary file: {cut}: "
            "truncated"),
  ]:
    run = subprocess.run(
        [sys.executable, "-m", "bert_jax.word2vec.query", "--vectors", vectors,
         "--neighbors", "king"], capture_output=True, text=True, check=False,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert run.stderr.startswith(expected) and len(run.stderr.splitlines()) == 1, run.stderr
