"""The README's contents and bench/RESULTS.md's summary table link to headings that exist.

Anchors as GitHub makes them: the heading's text lower-cased, every character other than
a letter, digit, `_`, `-` or space dropped, spaces turned into `-`, `-1`, `-2` ... appended
to repeats; headings inside ``` blocks do not count.
"""
import collections
import os
import re

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
  rows = [l for l in summary.splitlines() if l.startswith("| [")]
  assert len(rows) >= 15
  links = _links(summary)
  assert len(links) == len(rows)
  assert sorted(set(links) - anchors(text)) == []


def test_readme_contents_link_to_its_sections():
  text = _read("README.md")
  contents = text[text.index("Contents:"):text.index("\n## ")]
  links = _links(contents)
  assert len(links) >= 10
  assert sorted(set(links) - anchors(text)) == []
