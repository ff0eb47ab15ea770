"""The documentation site: `mkdocs build --strict` (what `make docs` runs) succeeds, so a
broken link, a page missing from the nav or an anchor that does not exist fails here; and
its home page, opened in headless Chromium, shows the title, the two commands and the
picture."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

pytest.importorskip("mkdocs", reason="mkdocs comes with requirements-test.txt")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
  out = tmp_path_factory.mktemp("site")
  proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                         str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return out


def test_strict_build_has_every_page(site):
  pages = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
  for page in pages + ["index", "results"]:
    assert os.path.isfile(os.path.join(site, f"{page}.html")), page
  with open(os.path.join(site, "results.html"), encoding="utf-8") as f:
    results = f.read()
  # GitHub's anchors (scripts/mkdocs_hooks.py), which README and RESULTS link to.
  assert 'id="aot-bert-large-s512-on-v5e4x4"' in results  # "AOT: BERT-large S512 on v5e:4x4"
  assert 'id="cpu-tuning-of-the-model-path-bertbase-step-8-x-128-float32"' in results


# Written into a copy of the home page: after the page has loaded, each image's decoded
# width, for --dump-dom to print (0 for a picture that did not render).
_PROBE = ("<script>window.addEventListener('load', () => { for (const i of document.images) "
          "i.setAttribute('data-natural-width', i.naturalWidth); "
          "document.body.setAttribute('data-loaded', '1'); });</script>")


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian chromium "
                    "(make install-test installs it as root)")
def test_home_page_in_headless_chromium(site, tmp_path):
  with open(os.path.join(site, "index.html"), encoding="utf-8") as f:
    page = f.read()
  probe = os.path.join(site, "index_probe.html")  # beside index.html: same relative paths
  with open(probe, "w", encoding="utf-8") as f:
    f.write(page.replace("</body>", _PROBE + "</body>"))
  cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=5000", "--dump-dom", "file://" + probe]
  dom = subprocess.run(cmd, check=True, timeout=180, capture_output=True, text=True).stdout
  assert 'data-loaded="1"' in dom, dom[-2000:]
  assert re.search(r"<title>\s*bert_jax\s*</title>", dom)
  code = " ".join(re.findall(r"<code[^>]*>(.*?)</code>", dom, re.S))
  assert "make demo" in code and "make test" in code
  img = re.search(r'<img[^>]*src="pictures/curves_demo\.png"[^>]*>', dom)
  assert img, "the learning-curves picture is not on the home page"
  width = re.search(r'data-natural-width="(\d+)"', img.group(0))
  assert width and int(width.group(1)) > 0, img.group(0)
