"""bench/word2vec/summary.py: the goal against gensim (workers 2) from per-seed rows, written
as JSON (numpy scalars included); no training."""
import json
import os
import sys

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "bench", "word2vec"), os.path.join(_ROOT, "bench")]
import results_io  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import summary  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def _rows(ws, simlex, analogy):
  return [{"wordsim353": np.float64(w), "simlex999": np.float64(s), "analogy": np.float64(a),
           "words_per_sec": np.float64(1e5)} for w, s, a in zip(ws, simlex, analogy)]


def test_within_one_gensim_sd_is_met_and_the_file_is_json(tmp_path):
  rows = {"ours": _rows([0.25, 0.26, 0.24], [0.16, 0.15, 0.17], [0.022, 0.023, 0.021]),
          "gensim-w2": _rows([0.25, 0.27, 0.23], [0.15, 0.16, 0.17], [0.023, 0.022, 0.024])}
  res = summary.result(rows, "enwiki-first", 0.5)
  assert res["goal"]["met"] is True
  assert res["headline"] == "WS353 0.250 vs 0.250, SimLex 0.160 vs 0.160 (3 seeds, enwiki-first)"
  assert res["anchor"].startswith("gensim's Word2Vec (workers 2)")
  with open(results_io.write(res, str(tmp_path)), encoding="utf-8") as f:
    assert json.load(f)["goal"]["met"] is True
  names = [f["name"] for f in res["figures"]]
  assert "ours wordsim353" in names and "gensim-w2 analogy" in names


def test_a_gap_past_one_sd_or_the_analogy_floor_is_not_met():
  gensim = _rows([0.25, 0.26, 0.24], [0.16, 0.16, 0.16], [0.023, 0.023, 0.023])
  low = {"ours": _rows([0.22, 0.23, 0.21], [0.16, 0.16, 0.16], [0.023, 0.023, 0.023]),
         "gensim-w2": gensim}
  assert summary.result(low, "enwiki-first", 0.5)["goal"]["met"] is False
  analogy = {"ours": _rows([0.25, 0.26, 0.24], [0.16, 0.16, 0.16], [0.019, 0.019, 0.019]),
             "gensim-w2": gensim}
  assert summary.result(analogy, "enwiki-first", 0.5)["goal"]["met"] is False
  alone = summary.result({"ours": gensim}, "lee-first", 0.5)
  assert alone["goal"]["met"] is None and alone["headline"].startswith("ours only")
