"""The figures README.md and docs/*.md show are bench/RESULTS.md's, as it prints them, or
carry their date and hardware (the rules and the markup: tests/docs_figures.py)."""
import os

import pytest

from tests import docs_figures
from tests.test_docs import anchors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(f"docs/{f}" for f in os.listdir(os.path.join(ROOT, "docs"))
                               if f.endswith(".md"))


def _read(path: str) -> str:
  with open(os.path.join(ROOT, path), encoding="utf-8") as f:
    return f.read()


@pytest.mark.parametrize("page", PAGES)
def test_every_figure_is_its_results_or_dated(page):
  assert docs_figures.problems(_read(page), page, _read("bench/RESULTS.md")) == []


def test_every_results_section_is_found_with_its_summary_row():
  text = _read("bench/RESULTS.md")
  found = docs_figures.sections(text)
  assert set(found) == anchors(text) - {"benchmark-results"}
  demo = found["make-demo-from-a-fresh-clone"]
  assert "498 s" in demo and "8 min 18 s, fresh clone to the report" in demo


def test_a_result_measured_again_fails_the_pages_that_quote_the_old_figure():
  results = _read("bench/RESULTS.md")
  assert "8 min 18 s" in results
  again = results.replace("8 min 18 s", "8 min 40 s")
  out = docs_figures.problems(_read("README.md"), "README.md", again)
  assert any(line.endswith("'8 min 18 s' is not what RESULTS#make-demo-from-a-fresh-clone says")
             for line in out), out
  assert docs_figures.problems(_read("docs/getting-started.md"), "docs/getting-started.md",
                               again) != []


RESULTS = """\
# Benchmark results

| result | goal | anchor | figure | hardware | met | date |
| --- | --- | --- | --- | --- | --- | --- |
| [Demo run](#demo-run) | <= 8 min | the budget | 8 min 18 s; 1.08x the old step | AMD EPYC, 2 cores | not met | 2026-12-07 |

## Demo run
`python bench/demo.py`; commit `abc`, 2026-12-07. Machine: AMD EPYC, 2 cores.

| figure | value | note |
| --- | --- | --- |
| wall time | 498 s | 8 min 18 s |
| held-out accuracy | 0.3171 |  |
| old step / new step | 1.084 x | median of 6 rounds |
| fill rate | 43.2 % |  |
"""


def _problems(text: str, page: str = "docs/page.md") -> list:
  return docs_figures.problems(text, page, RESULTS)


def test_a_figure_linked_to_its_result_is_checked_against_it():
  link = "../bench/RESULTS.md#demo-run"
  assert _problems(f"The demo took [8 min 18 s]({link}), [0.3171]({link}) held out.\n") == []
  assert _problems(f"The demo took [8 min 20 s]({link}).\n") == [
      "docs/page.md:1: '8 min 20 s' is not what RESULTS#demo-run says"]
  # Word boundaries: a rounded or truncated figure is not the result's.
  assert _problems(f"Held out: [0.317]({link}).\n") == [
      "docs/page.md:1: '0.317' is not what RESULTS#demo-run says"]
  assert _problems("Took [8 min 18 s](../bench/RESULTS.md#demo-walk).\n") == [
      "docs/page.md:1: '8 min 18 s' links RESULTS#demo-walk: no such section"]
  # From the README, bench/RESULTS.md without ../; a table row's first cell is its name.
  row = "| [Demo run, 2 cores](bench/RESULTS.md#demo-run) | {} |\n"
  assert _problems(row.format("8 min 18 s, 43.2%"), "README.md") == []
  assert _problems(row.format("8 min 19 s"), "README.md") == [
      "README.md:1: '19 s' is not in RESULTS#demo-run, which its sentence cites"]


def test_a_sentence_that_cites_a_section_quotes_each_of_its_figures_from_it():
  cite = "([bench/RESULTS.md](../bench/RESULTS.md#demo-run))"
  assert _problems(f"It took 498 s, 1.084x the old step, also 1.08x, 43.2 % full {cite}.\n") == []
  assert _problems(f"Intro.\nIt took 497 s\nin all {cite}. Next.\n") == [
      "docs/page.md:2: '497 s' is not in RESULTS#demo-run, which its sentence cites"]
  # An older figure beside a result: its own date and hardware, in its own parenthesis.
  assert _problems(f"It took 498 s, 4.26 s before {cite}.\n") == [
      "docs/page.md:1: '4.26 s' is not in RESULTS#demo-run, which its sentence cites"]
  assert _problems(f"It took 498 s, 4.26 s before (2-core CPU, 2026-11-25) {cite}.\n") == []


def test_a_figure_without_a_result_names_its_date_and_hardware():
  assert _problems("A step took 4.26 s.\n") == [
      "docs/page.md:1: '4.26 s' cites no section of bench/RESULTS.md, and its paragraph "
      "names no date and hardware"]
  assert _problems("A step took 4.26 s (2026-11-25).\n") != []  # no hardware
  assert _problems("A step took 4.26 s (2-core AMD EPYC, 2026-11-25).\n") == []
  assert _problems("On the 2-core AMD EPYC, 2026-11-25:\nthe step took 4.26 s, 92.6 "
                   "examples/s, 3-6x faster.\n") == []
  assert _problems("On the 2-core AMD EPYC, 2026-11-25.\n\nThe step took 4.26 s.\n") != []
  assert _problems("| case | time |\n| --- | --- |\n| a | 6.4 min |\n") != []


def test_settings_limits_estimates_and_code_are_not_figures():
  assert _problems(
      "BERT-tiny, 12 layers, hidden 768, batch 8 x 128, 30% masking, 10% warmup, lr 2e-5.\n"
      "Prepared within the timeout (default 2 h); the goal is <= 8 min, MFU >= 50%.\n"
      "About 8 minutes on one H100 (not yet run: an estimate).\n\n"
      "| corpus | expected wall |\n| --- | --- |\n| C4 | ~35-55 min |\n\n"
      "Run `sleep 5 s` or read the log line `took 4.26 s`.\n"
      "<!-- docs-test: took 4.26 s -->\n"
      "```text\nstep 100: 4.26 s, 120 seq/s\n```\n") == []


def test_figures_finds_units_rates_ratios_and_scores():
  found = [f for _, _, f in docs_figures.figures(
      "took 8 min 18 s, 5.50 GiB, 198,111 seq/s, 120 sequences a second, 1.87x, 3-6x "
      "faster, 20%, ~100 GB; BLEU 100.00, held-out accuracy 0.700, perplexity 194; "
      "not S512, v5e:4x4, 12 layers, 8 x 128, 2e-5 or 1.33M")]
  assert found == ["8 min", "18 s", "5.50 GiB", "198,111 seq/s", "120 sequences a second",
                   "1.87x", "3-6x", "20%", "100 GB", "100.00", "0.700", "194"]
