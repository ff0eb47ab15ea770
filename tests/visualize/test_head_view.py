"""The HTML head view: one self-contained file that headless Chromium renders (not blank)."""
import os
import shutil
import subprocess

import matplotlib.image
import numpy as np
import pytest

from bert_jax.visualize import head_view

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _weights(layers=2, heads=3, n=5, seed=0):
  x = np.random.default_rng(seed).random((layers, heads, n, n)) ** 4
  return x / x.sum(-1, keepdims=True)


def test_page_is_self_contained_and_round_trips_the_weights(tmp_path):
  tokens = ["[CLS]", "a", "</script>", "b", "[SEP]"]
  page = head_view.render(_weights(), tokens, tokens, "t")
  assert "<script src" not in page and "<link" not in page and "http" not in page
  assert page.count("</script>") == 1            # the token "</script>" is escaped
  with pytest.raises(ValueError, match="do not fit"):
    head_view.render(_weights(n=4), tokens, tokens, "t")


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian chromium "
                    "(make install-test installs it)")
def test_headless_chromium_screenshot_is_not_blank(tmp_path):
  tokens = ["[CLS]", "the", "cat", "sat", "[SEP]"]
  page = head_view.write(str(tmp_path / "heads.html"), _weights(), tokens, tokens)
  png = tmp_path / "shot.png"
  cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={png}", "--window-size=800,600", "file://" + page]
  subprocess.run(cmd, check=True, timeout=180, capture_output=True)
  image = matplotlib.image.imread(png)[..., :3]
  assert image.shape[:2] == (600, 800)
  # A blank (white) page has zero variance; the drawn lines, tokens and table do not.
  assert image.std() > 0.05, image.std()
  assert (image.reshape(-1, 3) < 0.5).any(axis=1).mean() > 0.01   # some dark pixels (text)
