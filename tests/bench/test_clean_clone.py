"""bench/clean_clone.py reads make test's two pytest stages from its output: the suite
against its 12 minutes, the docs stage beside it."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import clean_clone  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

OUTPUT = """\
........ [100%]
============================= slowest 15 durations =============================
41.20s call     tests/test_aot.py::test_bert_tiny_fits
12.00s setup    tests/test_aot.py::test_report_json
3.00s call     tests/test_other.py::test_x
1051 passed, 12 skipped, 22 deselected in 540.25s (0:09:00)
......
22 passed, 1006 deselected in 301.50s (0:05:01)
"""


def test_both_stages_are_read_in_order():
  assert clean_clone.pytest_summaries(OUTPUT) == [
      ({"passed": 1051, "skipped": 12, "deselected": 22}, 540.25),
      ({"passed": 22, "deselected": 1006}, 301.5)]
  assert clean_clone.aot_durations(OUTPUT) == [41.2, 12.0]


def test_the_suite_is_the_clock_less_the_docs_stage():
  suite, aot = clean_clone.test_results(660 + 301.5, OUTPUT, load_before=0.1)
  figures = {f["name"]: f for f in suite["figures"]}
  assert figures["clone, install and the suite (make test's first stage)"]["value"] == 660
  assert figures["pytest -n 2 --dist worksteal"]["note"] == "1051 passed, 12 skipped"
  assert figures["the docs stage (pages marked docs_slow)"]["value"] == 302
  assert suite["headline"] == ("11 min 0 s to the suite's end (pytest 540 s, 1051 passed); "
                               "docs stage 5 min 2 s, fresh clone")
  assert suite["goal"]["met"] is True
  assert aot["figures"][0]["value"] == 53.2
  over, _ = clean_clone.test_results(12 * 60 + 1 + 301.5, OUTPUT, load_before=0.1)
  assert over["goal"]["met"] is False
