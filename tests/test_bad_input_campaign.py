"""scripts/bad_input_campaign.py as tests: every case through the real CLI ends in one
`error:` line, no traceback, exit 2, and every file that was on disk keeps its bytes; the
faults page lists every case."""
import os

import pytest

from scripts import bad_input_campaign as campaign

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("name", [c.name for c in campaign.CASES])
def test_a_mistake_is_one_line_and_loses_nothing(name, tmp_path):
  row = campaign.run_case(campaign.BY_NAME[name], str(tmp_path))
  assert row["problems"] == [], row
  assert row["lost_bytes"] == 0 and not row["traceback"]


def test_the_faults_page_lists_every_case():
  with open(os.path.join(ROOT, "docs", "reliability.md"), encoding="utf-8") as f:
    page = f.read()
  missing = [c.name for c in campaign.CASES if f"`{c.name}`" not in page]
  assert not missing, f"docs/reliability.md lacks the bad-input cases {missing}"
