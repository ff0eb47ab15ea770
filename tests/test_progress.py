"""bert_jax/runtime/progress.py: tqdm bars on stderr only when it is a terminal and not switched
off; the embed CLI's bar and its --noprogress."""
import io
import os
import sys

from bert_jax import embed
from bert_jax.runtime import progress

TINY = os.path.join(os.path.dirname(__file__), "testdata", "hf", "tiny_bert")


class _Terminal(io.StringIO):
  def isatty(self):
    return True


def _terminal(monkeypatch):
  """A terminal-like stderr to read back (set inside the test: pytest's own capture puts
  its stderr back between a fixture's setup and the test); progress on, and on again
  afterwards."""
  fake = _Terminal()
  monkeypatch.setattr(sys, "stderr", fake)
  monkeypatch.setattr(progress, "_enabled", True)
  return fake


def test_a_bar_on_a_terminal(monkeypatch):
  stderr = _terminal(monkeypatch)
  assert list(progress.bar(range(3), desc="eval", unit="batch")) == [0, 1, 2]
  assert "eval:   0%" in stderr.getvalue() and "| 0/3 [" in stderr.getvalue()


def test_no_bar_when_switched_off_not_process_0_or_not_a_terminal(monkeypatch):
  stderr = _terminal(monkeypatch)
  progress.set_enabled(False)
  assert list(progress.bar(range(3), desc="off")) == [0, 1, 2]
  progress.set_enabled(True)
  manual = progress.bar(desc="other process", total=2, show=False)
  manual.update()
  manual.close()
  assert stderr.getvalue() == ""
  monkeypatch.setattr(sys, "stderr", io.StringIO())  # a pipe or a log file
  assert not progress.enabled()
  assert list(progress.bar(range(2), desc="piped")) == [0, 1]
  assert sys.stderr.getvalue() == ""


def test_embed_shows_a_bar_unless_noprogress(tmp_path, monkeypatch):
  stderr = _terminal(monkeypatch)
  lines = tmp_path / "in.txt"
  # Two texts of 52 tokens cannot share a 96-token row, and batch_size 1 gives one row a
  # pass (inference/passes.plan_passes): a bar of 2 passes.
  lines.write_text("the " * 50 + "\n" + "a " * 50 + "\n", encoding="utf-8")
  argv = ["--checkpoint", TINY, "--input", str(lines), "--batch_size", "1"]
  assert embed.main(argv + ["--output", str(tmp_path / "a.npy")]) == 0
  assert "embed:   0%" in stderr.getvalue() and "| 0/2 [" in stderr.getvalue()
  stderr.seek(0)
  stderr.truncate()
  assert embed.main(argv + ["--output", str(tmp_path / "b.npy"), "--noprogress"]) == 0
  assert "| 0/2 [" not in stderr.getvalue() and "embed: wrote" in stderr.getvalue()
