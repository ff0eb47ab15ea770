"""Our BLEU / chrF equal the sacrebleu command line on the same files."""
import re
import subprocess
import sys

import pytest

from bert_jax.tasks.translation import metrics

# The CLI of the sacrebleu this interpreter has (a requirement): no venv path to find.
SACREBLEU = [sys.executable, "-m", "sacrebleu"]

REFS = ["three hundred and twenty-one", "one thousand and one",
        "twelve thousand, three hundred and forty-five", "the cat sat on the mat.",
        "nine hundred and ninety-nine thousand"]
HYPS = ["three hundred and twenty-one", "one thousand one",
        "twelve thousand, three hundred forty-five", "the cat sat on a mat .",
        "nine hundred ninety-nine thousand and"]


def test_bleu_and_chrf_equal_the_sacrebleu_cli(tmp_path):
  ref, hyp = tmp_path / "ref.en", tmp_path / "hyp.en"
  ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
  hyp.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
  out = subprocess.run([*SACREBLEU, str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "-b",
                        "-w", "6"], capture_output=True, text=True, check=True).stdout
  cli_bleu, cli_chrf = (float(x) for x in re.findall(r"[\d.]+", out)[:2])
  ours = metrics.corpus_scores(HYPS, REFS)
  assert ours["bleu"] == pytest.approx(cli_bleu, abs=1e-4)
  assert ours["chrf"] == pytest.approx(cli_chrf, abs=1e-4)
  assert 0 < ours["bleu"] < 100
  assert ours["exact_match"] == pytest.approx(1 / 5)
  assert "tok:13a" in ours["signature"] and "chrF" in ours["signature"]
