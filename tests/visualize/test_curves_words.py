"""`visualize curves` and `visualize words`."""
import json
import os

import matplotlib.image
import numpy as np

from bert_jax.word2vec.vectors import save_word2vec_format
from bert_jax.visualize import __main__ as cli
from bert_jax.visualize import curves, words


def _run(path, rows):
  path.mkdir()
  with open(path / "metrics.jsonl", "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in rows))
  return str(path)


def test_curves_several_runs_train_and_eval(tmp_path, capsys):
  a = _run(tmp_path / "a", [{"step": s, "train/loss": 10 - s, "train/mlm_accuracy": s / 10}
                            for s in (1, 2, 3)] + [{"step": 3, "eval/loss": 8.5}])
  # A run logged before the train/ prefix, resumed: the later row of a step wins.
  b = _run(tmp_path / "b", [{"step": 2, "loss": 5.0}, {"step": 2, "loss": 4.0}])
  assert curves.series(curves.read_metrics(b), "loss")[1].tolist() == [4.0]
  assert curves.train_series(curves.read_metrics(b), "loss")[1].tolist() == [4.0]
  assert curves.train_series(curves.read_metrics(a), "loss")[1].tolist() == [9.0, 8.0, 7.0]
  png = tmp_path / "c.png"
  assert cli.main(["curves", "--workdir", a, "--workdir", b, "--metrics", "loss",
                   "--output", str(png)]) == 0
  out = capsys.readouterr().out
  assert "a loss: train 9.0000 -> 7.0000 (steps 1..3); eval last 8.5000 @ 3" in out
  assert matplotlib.image.imread(png).shape == (360, 460, 4)
  assert cli.main(["curves", "--workdir", a, "--metrics", "nsp_accuracy"]) == 2
  assert ("no run logged it (logged: eval/loss, train/loss, train/mlm_accuracy)"
          in capsys.readouterr().err)
  # --output naming the run's own metrics.jsonl: refused, the metrics left as they were
  # (it was overwritten by the PNG).
  metrics = os.path.join(a, "metrics.jsonl")
  before = open(metrics, encoding="utf-8").read()
  assert cli.main(["curves", "--workdir", a, "--metrics", "loss", "--output", metrics]) == 2
  assert capsys.readouterr().err == (
      f"visualize: error: --output {metrics} is the metrics of --workdir {metrics}: writing "
      "it would destroy what the command reads; give another file\n")
  assert open(metrics, encoding="utf-8").read() == before


def test_pca_matches_covariance_eigenvectors():
  x = np.random.default_rng(0).normal(size=(8, 5)) * [5, 3, 1, 0.5, 0.1]
  coords, ratio = words.pca_2d(x)
  centred = x - x.mean(0)
  values, vectors = np.linalg.eigh(np.cov(centred.T))             # ascending
  for k in range(2):
    np.testing.assert_allclose(np.abs(coords[:, k]), np.abs(centred @ vectors[:, -1 - k]),
                               atol=1e-9)
  np.testing.assert_allclose(ratio, values[::-1][:2] / values.sum(), atol=1e-9)


def test_words_cli(tmp_path, capsys):
  vocab = ["king", "queen", "man", "woman"]
  vectors = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
  path = tmp_path / "vectors.bin"
  save_word2vec_format(str(path), vocab, vectors, binary=True)
  png = tmp_path / "w.png"
  assert cli.main(["words", "--vectors", str(path), "--words", "king,queen,man",
                   "--output", str(png)]) == 0
  assert matplotlib.image.imread(png).shape == (520, 640, 4)
  assert cli.main(["words", "--vectors", str(path), "--words", "king,prince"]) == 2
  assert "not in the vocabulary" in capsys.readouterr().err


def test_entry_points_exit_2_without_traceback(tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  for argv, needle in [
      (["bert_jax.visualize", "positions", "--kind", "rotary", "--d_model", "7",
        "--output", str(tmp_path / "p.png")], "visualize: error: rotary encodings need an even"),
      (["bert_jax.fill_mask", "--checkpoint", str(tmp_path / "nope"), "--text", "[MASK]"],
       "fill_mask: error: --checkpoint")]:
    proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
