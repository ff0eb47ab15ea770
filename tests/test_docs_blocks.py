"""Every shell and Python block of README.md and docs/*.md runs as written.

Each page's runnable blocks run in order in a temporary directory (configs/, launch/,
scripts/ and bench/ linked in, as in a checkout; docs/pictures/ a real folder, so a
picture a page draws lands there and not in the repository) through the real CLIs of
the installed package, with the tiny settings each block's marker appends (the markup:
tests/docs_blocks.py). Pages with a `slow` block run in CI's second stage (-m docs_slow).
"""
import os
import re
import subprocess
import sys

import pytest

from tests import docs_blocks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(f"docs/{f}" for f in os.listdir(os.path.join(ROOT, "docs"))
                               if f.endswith(".md"))
LINKED = ("configs", "launch", "scripts", "bench")
TIMEOUT_S = 900  # a block; the slowest (a tiny translation run and its decoding) take ~2 min


def _page_blocks(page: str) -> list:
  with open(os.path.join(ROOT, page), encoding="utf-8") as f:
    return docs_blocks.blocks(f.read(), page)


def _env(home: str) -> dict:
  """The user's environment: the venv's programs first, one CPU device (the suite's 8
  fake ones are not what a reader has), the platform left to the CLI to settle."""
  env = dict(os.environ, HOME=home, MPLBACKEND="Agg",
             PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
  env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "",
                            env.get("XLA_FLAGS", "")).strip()
  for key in ("JAX_PLATFORMS", "PYTHONPATH"):
    env.pop(key, None)
  return env


def run_page(page_blocks: list, workspace: str, home: str) -> int:
  """Runs the page's blocks that are not skipped, in order, in `workspace`; the number
  run. A failure is an AssertionError naming the block and ending with its output."""
  for name in LINKED:
    if not os.path.exists(os.path.join(workspace, name)):
      os.symlink(os.path.join(ROOT, name), os.path.join(workspace, name))
  os.makedirs(os.path.join(workspace, "docs", "pictures"), exist_ok=True)
  os.makedirs(home, exist_ok=True)
  ran = 0
  for b in page_blocks:
    if not b.runnable or b.mode == "skip":
      continue
    if b.lang == "python":
      with open(os.path.join(workspace, docs_blocks.python_file(b)), "w",
                encoding="utf-8") as f:
        f.write(b.code)
    shell = docs_blocks.script(b)
    proc = subprocess.run(["bash", "-c", shell], cwd=workspace, env=_env(home),
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    ran += 1
    if proc.returncode:
      out = (proc.stdout + proc.stderr)[-3000:]
      raise AssertionError(f"{b.where}: the {b.lang} block exits {proc.returncode}:\n"
                           f"{shell}\n--- its output, last lines:\n{out}")
  return ran


def _marks(page: str) -> list:
  try:
    modes = {b.mode for b in _page_blocks(page)}
  except docs_blocks.MarkupError:
    modes = set()  # test_every_block_is_marked names the problem
  if "slow" in modes:
    return [pytest.mark.docs_slow]
  return [] if modes & {"run"} else [pytest.mark.skip(reason="no block of the page is run")]


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_marked(page):
  assert docs_blocks.problems(_page_blocks(page)) == []


@pytest.mark.parametrize("page", [pytest.param(p, marks=_marks(p)) for p in PAGES])
def test_page_runs_as_written(page, tmp_path, tmp_path_factory):
  home = str(tmp_path_factory.getbasetemp() / "docs_home")  # prepared data, shared by pages
  assert run_page(_page_blocks(page), str(tmp_path), home) > 0


# ------------------------------------------------------------- the markup, on its own
PAGE = """\
Some prose.

<!-- docs-test: run bert_jax.main="--config.train.num_steps=2" before="touch in.txt" -->
```bash
# a comment
python -m bert_jax.main --config configs/x.py \\
    --workdir w   # trains
python -m bert_jax.fill_mask --text 'a # b'
```

```text
output
```

<!-- docs-test: skip needs a TPU VM -->
```bash
gcloud compute tpus tpu-vm create my-pod
```
"""


def test_blocks_reads_languages_markers_and_lines():
  page = docs_blocks.blocks(PAGE, "p.md")
  assert [(b.line, b.lang, b.mode) for b in page] == [
      (4, "bash", "run"), (11, "text", ""), (16, "bash", "skip")]
  assert page[0].args == {"bert_jax.main": "--config.train.num_steps=2"}
  assert page[0].before == "touch in.txt" and page[2].reason == "needs a TPU VM"
  assert docs_blocks.problems(page) == []


def test_script_appends_the_markers_args_before_the_comment():
  b = docs_blocks.blocks(PAGE, "p.md")[0]
  assert docs_blocks.commands(b.code) == [
      "python -m bert_jax.main --config configs/x.py     --workdir w",
      "python -m bert_jax.fill_mask --text 'a # b'"]
  assert docs_blocks.script(b).splitlines() == [
      "set -euo pipefail", f"if [ -f {docs_blocks.STATE} ]; then source {docs_blocks.STATE}; fi",
      "touch in.txt", "# a comment",
      "python -m bert_jax.main --config configs/x.py \\",
      "    --workdir w --config.train.num_steps=2  # trains",
      "python -m bert_jax.fill_mask --text 'a # b'"]


@pytest.mark.parametrize("markup, problem", [
    ("```\nls\n```\n", "p.md:1: a fenced block without a language (```text for output)"),
    ("```bash\nls\n```\n", "p.md:1: a bash block without a docs-test marker (run, slow or "
                           "skip WHY) on the line before it"),
    ("<!-- docs-test: run sacrebleu=-q -->\n```bash\nls\n```\n",
     "p.md:2: marker arguments for 'sacrebleu', which no command of the block starts"),
    ("<!-- docs-test: run -->\n```text\nls\n```\n",
     "p.md:2: a docs-test marker on a text block, which is not run"),
])
def test_problems_names_each_markup_fault(markup, problem):
  assert docs_blocks.problems(docs_blocks.blocks(markup, "p.md")) == [problem]


@pytest.mark.parametrize("marker, message", [
    ("skip", "p.md:2: a skip marker gives its reason: <!-- docs-test: skip WHY -->"),
    ("later", "p.md:2: docs-test marker 'later': mode 'later' is not one of ('run', 'slow', "
              "'skip')"),
    ("run steps", "p.md:2: docs-test marker token 'steps' is not PROGRAM=\"ARGS\""),
])
def test_a_bad_marker_is_one_error_naming_the_block(marker, message):
  with pytest.raises(docs_blocks.MarkupError) as e:
    docs_blocks.blocks(f"<!-- docs-test: {marker} -->\n```bash\nls\n```\n", "p.md")
  assert str(e.value) == message


def test_a_broken_block_fails_its_page_naming_the_block(tmp_path):
  """The page test can fail: the first block runs, the broken one stops the page with
  its place and its output, and the block after it does not run."""
  page = docs_blocks.blocks(
      "<!-- docs-test: run -->\n```bash\necho ok > first.txt\n```\n\n"
      "<!-- docs-test: run -->\n```bash\npython -m bert_jax.no_such_cli --help\n```\n\n"
      "<!-- docs-test: run -->\n```python\nopen('third.txt', 'w').close()\n```\n", "p.md")
  with pytest.raises(AssertionError) as e:
    run_page(page, str(tmp_path), str(tmp_path / "home"))
  assert str(e.value).startswith("p.md:7: the bash block exits 1:\n")
  assert "No module named bert_jax.no_such_cli" in str(e.value)
  assert (tmp_path / "first.txt").read_text() == "ok\n"
  assert not (tmp_path / "third.txt").exists()
  assert os.path.realpath(tmp_path / "configs") == os.path.realpath(os.path.join(ROOT, "configs"))


def test_a_config_key_picks_the_commands_of_that_config():
  b = docs_blocks.blocks(
      '<!-- docs-test: run configs/w2v.py="--config.train.epochs=1" '
      'configs/tiny.py="--config.train.num_steps=4" -->\n```bash\n'
      "python -m bert_jax.main --config configs/tiny.py:demo --workdir a\n"
      "python -m bert_jax.main --config configs/w2v.py --workdir b\n```\n", "p.md")[0]
  assert docs_blocks.script(b).splitlines()[2:] == [
      "python -m bert_jax.main --config configs/tiny.py:demo --workdir a --config.train.num_steps=4",
      "python -m bert_jax.main --config configs/w2v.py --workdir b --config.train.epochs=1"]
  assert docs_blocks.problems([b]) == []


def test_shell_variables_of_a_block_reach_the_next(tmp_path):
  page = docs_blocks.blocks(
      "<!-- docs-test: run -->\n```bash\nNAME=$(echo kept)\n```\n\n"
      "<!-- docs-test: run -->\n```bash\necho \"$NAME\" > got.txt\n```\n", "p.md")
  assert run_page(page, str(tmp_path), str(tmp_path / "home")) == 2
  assert (tmp_path / "got.txt").read_text() == "kept\n"
