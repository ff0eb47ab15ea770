"""README.md, docs/ and bench/RESULTS.md: links land on headings that exist, the figures
the README quotes are RESULTS' own, and the pages say where the code is as it is.

Anchors as GitHub makes them: the heading's text lower-cased, every character other than
a letter, digit, `_`, `-` or space dropped, spaces turned into `-`, `-1`, `-2` ... appended
to repeats; headings inside ``` blocks do not count.
"""
import collections
import os
import re
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def anchors(text: str) -> set[str]:
  seen, out, in_code = collections.Counter(), set(), False
  for line in text.splitlines():
    if line.startswith("```"):
      in_code = not in_code
      continue
    heading = None if in_code else re.match(r"#{1,6} (.+)$", line)
    if heading:
      slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
      out.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
      seen[slug] += 1
  return out


def _links(text: str) -> list[str]:
  return re.findall(r"\]\(#([^)]+)\)", text)


def _read(*path):
  with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
    return f.read()


def test_anchors_follow_githubs_rule():
  text = ("## Data pipeline\n```\n# not a heading\n```\n### `launch/sweep.py --aot`: S512\n"
          "## word2vec\n### word2vec\n## The AOT tests: goal ≤ 90 s\n")
  assert anchors(text) == {"data-pipeline", "launchsweeppy---aot-s512", "word2vec",
                           "word2vec-1", "the-aot-tests-goal--90-s"}


def test_results_summary_rows_link_to_their_sections():
  text = _read("bench", "RESULTS.md")
  summary = text[:text.index("\n## ")]  # the table above the first section
  header, rows = _summary_rows(text)
  assert header == ["result", "goal", "anchor", "figure", "hardware", "met", "date"]
  assert len(rows) >= 15
  links = _links(summary)
  assert len(links) == len(rows) == len(set(links))
  assert sorted(set(links) - anchors(text)) == []


def _relative_links(text: str) -> list[tuple[str, str]]:
  """(path, anchor) of every markdown link or image that is not a web address."""
  out = []
  for target in re.findall(r"\]\(([^)\s]+)\)", text):
    if not target.startswith(("http://", "https://", "#")):
      path, _, anchor = target.partition("#")
      out.append((path, anchor))
  return out


PAGES = sorted(f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))


@pytest.mark.parametrize("page", ["README.md"] + [f"docs/{p}" for p in PAGES])
def test_links_resolve_to_files_and_headings(page):
  """On GitHub as on the site (mkdocs --strict checks the site: tests/test_docs_site.py)."""
  text = _read(page)
  base = os.path.dirname(os.path.join(ROOT, page))
  for path, anchor in _relative_links(text):
    target = os.path.normpath(os.path.join(base, path))
    assert os.path.exists(target), f"{page}: {path} does not exist"
    if anchor and path.endswith(".md"):
      with open(target, encoding="utf-8") as f:
        assert anchor in anchors(f.read()), f"{page}: {path}#{anchor}: no such heading"


def test_readme_is_short_and_links_every_page():
  text = _read("README.md")
  assert len(text.splitlines()) <= 250
  linked = {os.path.basename(p) for p, _ in _relative_links(text) if p.startswith("docs/")}
  assert sorted(set(PAGES) - linked) == []
  assert not re.search(r"\bissue \d+|#\d+\b|\b[0-9a-f]{7,40}\b", re.sub(r"\(.*?\)", "", text))


AOT = ["ours_splash_remat_full 4096 rows", "ours_splash_kv_proj 2048 rows"]
WORD2VEC = ["WS353 0.249 vs 0.258", "SimLex 0.160 vs 0.158"]
# What README's results table quotes from a row of RESULTS' summary table (its title ->
# figures of its "figure" column); README's row links to that row's section.
QUOTED = {
    "make demo from a fresh clone": ["8 min 18 s"],
    "Demo held-out accuracy": ["0.3171", "8.25x most-frequent-token", "bigram 0.1321"],
    "Translation, numbers task": ["BLEU 100.00", "exact match 100.0%", "1.4 min"],
    "word2vec vs gensim": WORD2VEC,
    "Fine-tuning published weights": ["0.700 vs 0.675"],
    "AOT: BERT-large S512 on v5e:4x4": AOT,
    "AOT: BERT-large S512 vs FlaxBertForPreTraining on v5e:4x4": [
        "ours_remat_full 2048 rows", "theirs_remat 2048 rows"],
    "Data pipeline throughput": ["198,111 seq/s pad + mask at 128"],
    "Time to quality vs run_mlm": ["20% of its clock", "3.49x"],
    "Fault campaign": ["15 / 15 resumed exactly"],
    "Multi-host equivalence": ["1.5e-07 relative loss difference"],
    "AOT ModernBERT-base S1024, remat none, v5e:2x2": [
        "128 rows (131,072 tokens) per step fit in 14.68 GiB per chip"],
    "ModernBERT-tiny vs BERT-tiny demo": ["ModernBERT-tiny 0.2547", "BERT-tiny :demo 0.3006"],
}


def _summary_rows(text: str) -> tuple[list[str], list[str]]:
  """(header cells, row lines) of the table above RESULTS' first section."""
  summary = text[:text.index("\n## ")]
  header = next(l for l in summary.splitlines() if l.startswith("| result |"))
  return ([c.strip() for c in header.strip("|").split(" | ")],
          [l for l in summary.splitlines() if l.startswith("| [")])


def test_readme_quotes_the_results_summary_as_it_is():
  header, summary = _summary_rows(_read("bench", "RESULTS.md"))
  column = header.index("figure")
  readme = _read("README.md")
  table = readme[readme.index("## Results"):]
  table = table[:table.index("\n## ")]
  rows = [l for l in table.splitlines() if l.startswith("| [")]
  assert len(rows) == len(QUOTED)
  for label, figures in QUOTED.items():
    row = [l for l in summary if l.startswith(f"| [{label}](")]
    assert len(row) == 1, f"RESULTS' summary has no row {label!r}"
    anchor = re.match(r"\| \[[^\]]+\]\(#([^)]+)\)", row[0]).group(1)
    headline = [c.strip() for c in row[0].strip("|").split(" | ")][column]
    for figure in figures:
      assert figure in headline, f"RESULTS' {label!r} row no longer says {figure!r}"
      quoting = [r for r in rows if figure in r]
      assert quoting, f"README's results table lacks {figure!r}"
      assert all(f"(bench/RESULTS.md#{anchor})" in r for r in quoting), (
          f"README quotes {figure!r} but does not link RESULTS' {label!r} section")


def test_tests_named_in_the_docs_exist():
  """`tests/x.py::test_name` in a page: the file defines that test."""
  for page in PAGES:
    for path, name in re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", _read("docs", page)):
      assert f"def {name}(" in _read(path), f"docs/{page}: {path}::{name} does not exist"


def test_architecture_names_every_room():
  text = _read("docs", "architecture.md")
  package = os.path.join(ROOT, "bert_jax")
  for name in sorted(os.listdir(package)):
    if name.endswith(".py") and name != "__init__.py" or (
        os.path.isdir(os.path.join(package, name)) and not name.startswith("__")):
      assert re.search(rf"\b{re.escape(name)}", text), f"docs/architecture.md lacks {name}"


def test_shell_variables_from_a_command_fail_loudly_when_empty():
  """`X=$(cmd)` in a page is followed by `: "${X:?...}"`: an empty path stops there, with
  the reason, instead of as the next command's argparse error."""
  for page in PAGES:
    lines = _read("docs", page).splitlines()
    for i, line in enumerate(lines):
      var = re.match(r"(\w+)=\$\(", line)
      if var:
        assert lines[i + 1].startswith(f': "${{{var.group(1)}:?'), f"docs/{page}: {line}"


def test_license_is_the_apache_2_text_pyproject_names():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    assert tomllib.load(f)["project"]["license"] == "Apache-2.0"
  text = _read("LICENSE")
  assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
  assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) == 202
