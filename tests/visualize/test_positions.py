"""`visualize positions`: the drawn matrices against the published formulas."""
import math

import matplotlib.image
import numpy as np
import pytest

from bert_jax.visualize import __main__ as cli
from bert_jax.visualize import plot
from tests.visualize.conftest import TINY


@pytest.fixture
def drawn(monkeypatch):
  """Captures the figures the CLI saves, so the test reads the heatmap's own pixels' data."""
  figures = []
  real_save = plot.save

  def save(fig, path):
    figures.append([im.get_array() for ax in fig.axes for im in ax.images])
    return real_save(fig, path)

  monkeypatch.setattr(plot, "save", save)
  return figures


def test_sinusoidal_heatmap_equals_the_formula(tmp_path, drawn, capsys):
  png = tmp_path / "p.png"
  assert cli.main(["positions", "--d_model", "128", "--length", "50", "--output",
                   str(png)]) == 0
  heatmap, similarity = drawn[0]
  assert heatmap.shape == (50, 128)
  for pos in range(50):
    for i in range(64):
      angle = pos / 10000 ** (2 * i / 128)
      assert heatmap[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
      assert heatmap[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)
  # PE(p) . PE(q) = sum_i cos((p - q) w_i): a function of p - q only.
  w = 1 / 10000 ** (np.arange(64) * 2 / 128)
  want = np.cos((np.arange(50)[:, None, None] - np.arange(50)[None, :, None]) * w).sum(-1)
  np.testing.assert_allclose(similarity, want, atol=1e-4)
  assert matplotlib.image.imread(png).shape == (460, 1100, 4)
  assert "matrix [50, 128]" in capsys.readouterr().out


def test_rotary_similarity_depends_on_distance_only(tmp_path, drawn):
  assert cli.main(["positions", "--kind", "rotary", "--d_model", "16", "--length", "12",
                   "--output", str(tmp_path / "r.png")]) == 0
  table, similarity = drawn[0]
  theta = 10000.0 ** (-np.arange(0, 16, 2) / 16)                  # Su et al. (2021)
  angles = np.arange(12)[:, None] * theta                           # [12, 8]
  # An all-ones x rotated: rotate-half pairing (j, j + d/2): (cos - sin, sin + cos).
  np.testing.assert_allclose(table, np.concatenate([np.cos(angles) - np.sin(angles),
                                                    np.sin(angles) + np.cos(angles)], -1),
                             atol=1e-5)
  for k in range(1, 12):
    np.testing.assert_allclose(np.diagonal(similarity, k), similarity[0, k], atol=1e-4)


def test_learned_from_checkpoint_and_bad_input(tmp_path, drawn, tiny, capsys):
  assert cli.main(["positions", "--kind", "learned", "--checkpoint", TINY, "--length", "20",
                   "--output", str(tmp_path / "l.png")]) == 0
  table = drawn[0][0]
  np.testing.assert_array_equal(
      table, tiny.params["bert"]["embeddings"]["position_embedder"]["embedding"]["embedding"][:20])
  for argv, needle in [(["--kind", "learned"], "--kind learned needs --checkpoint"),
                       (["--kind", "learned", "--checkpoint", TINY, "--length", "65"],
                        "--length 65 exceeds the checkpoint's 64 positions"),
                       (["--kind", "rotary", "--d_model", "7"], "even --d_model")]:
    assert cli.main(["positions", "--output", str(tmp_path / "x.png")] + argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err
