"""The fenced blocks of README.md and docs/*.md, their test markers, and how one runs.

Every fenced block names its language. Shell blocks (bash, sh) and Python blocks are run
by tests/test_docs_blocks.py, unless the line before the fence is a skip marker; `text`
(output, trees, logs) and the other languages are not run. A runnable block needs a
marker, so a new block cannot go unrun by accident:

  <!-- docs-test: run  [PROGRAM="ARGS" ...] [before="SHELL"] -->   run in the suite
  <!-- docs-test: slow [...] -->                                   run in CI's second stage
  <!-- docs-test: skip REASON -->                                  not run, and why

PROGRAM="ARGS" appends ARGS to every command of the block that PROGRAM starts: PROGRAM
is the module of `python -m MODULE` (bert_jax.main), the script of `python SCRIPT`
(launch/sweep.py), or the command itself (sacrebleu); or to every command with an
argument PROGRAM (configs/word2vec.py, also as configs/word2vec.py:ARG): the tiny
settings (steps, batch) that make a tutorial's command a test. before="SHELL" runs first (an input file the text
says the user brings). A page's blocks run in order in one directory, as a reader who
follows the page runs them.
"""
from __future__ import annotations

import dataclasses
import re
import shlex

RUNNABLE = {"bash": "shell", "sh": "shell", "shell": "shell", "python": "python"}
MODES = ("run", "slow", "skip")
_MARKER = re.compile(r"^<!-- docs-test: (.*?)\s*-->$")


@dataclasses.dataclass
class Block:
  page: str
  line: int  # of the opening fence, 1-based
  lang: str
  code: str
  mode: str = ""  # "" (no marker), run, slow, skip
  reason: str = ""  # skip's
  args: dict = dataclasses.field(default_factory=dict)  # PROGRAM -> ARGS
  before: str = ""

  @property
  def where(self) -> str:
    return f"{self.page}:{self.line}"

  @property
  def runnable(self) -> bool:
    return self.lang in RUNNABLE


class MarkupError(ValueError):
  pass


def parse_marker(body: str, where: str) -> dict:
  """The fields of a `<!-- docs-test: BODY -->` marker."""
  mode, _, rest = body.strip().partition(" ")
  if mode not in MODES:
    raise MarkupError(f"{where}: docs-test marker {body!r}: mode {mode!r} is not one of {MODES}")
  if mode == "skip":
    if not rest.strip():
      raise MarkupError(f"{where}: a skip marker gives its reason: <!-- docs-test: skip WHY -->")
    return {"mode": mode, "reason": rest.strip()}
  out = {"mode": mode, "args": {}, "before": ""}
  for token in shlex.split(rest):
    key, eq, value = token.partition("=")
    if not eq or not key:
      raise MarkupError(f"{where}: docs-test marker token {token!r} is not PROGRAM=\"ARGS\"")
    if key == "before":
      out["before"] = value
    else:
      out["args"][key] = value
  return out


def blocks(text: str, page: str) -> list[Block]:
  """The fenced blocks of a Markdown page, with the marker on the line before each."""
  out, lines, i = [], text.splitlines(), 0
  while i < len(lines):
    fence = re.match(r"^(`{3,})(.*)$", lines[i])
    if not fence:
      i += 1
      continue
    lang = fence.group(2).strip().split(" ")[0]
    end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1))
                and not lines[j].strip("`").strip()), None)
    if end is None:
      raise MarkupError(f"{page}:{i + 1}: a fenced block that is never closed")
    block = Block(page, i + 1, lang, "\n".join(lines[i + 1:end]) + "\n")
    marker = _MARKER.match(lines[i - 1].strip()) if i else None
    if marker:
      fields = parse_marker(marker.group(1), block.where)
      block.mode, block.reason = fields["mode"], fields.get("reason", "")
      block.args, block.before = fields.get("args", {}), fields.get("before", "")
    out.append(block)
    i = end + 1
  return out


def problems(page_blocks: list[Block]) -> list[str]:
  """What is wrong with a page's markup: a block without a language, a runnable block
  without a marker, a marker on a block that is not run, arguments for a program no
  command of the block starts."""
  out = []
  for b in page_blocks:
    if not b.lang:
      out.append(f"{b.where}: a fenced block without a language (```text for output)")
    elif b.runnable and not b.mode:
      out.append(f"{b.where}: a {b.lang} block without a docs-test marker (run, slow or "
                 "skip WHY) on the line before it")
    elif not b.runnable and b.mode:
      out.append(f"{b.where}: a docs-test marker on a {b.lang} block, which is not run")
    elif b.runnable and b.mode != "skip" and b.lang != "python":
      cmds = commands(b.code)
      out += [f"{b.where}: marker arguments for {p!r}, which no command of the block starts"
              for p in b.args if not any(matches(p, c) for c in cmds)]
  return out


def commands(code: str) -> list[str]:
  """The logical lines of a shell block (backslash continuations joined), comments and
  blank lines dropped."""
  out, cur = [], ""
  for line in code.splitlines():
    cur += line
    if cur.endswith("\\"):
      cur = cur[:-1]
      continue
    text = cur[:_comment_at(cur)].strip()
    if text:
      out.append(text)
    cur = ""
  return out


def _comment_at(line: str) -> int:
  """The index of the `#` that starts the line's comment (outside quotes), else len."""
  quote = ""
  for i, ch in enumerate(line):
    if quote:
      quote = "" if ch == quote else quote
    elif ch in "'\"":
      quote = ch
    elif ch == "#" and (i == 0 or line[i - 1].isspace()):
      return i
  return len(line)


def program(command: str) -> str:
  """What a command runs: MODULE of `python -m MODULE`, SCRIPT of `python SCRIPT`, else
  its first word (after VAR=value assignments)."""
  try:
    words = shlex.split(command)
  except ValueError:
    return ""
  while words and re.match(r"^\w+=", words[0]):
    words = words[1:]
  if not words:
    return ""
  if re.match(r"^(\S*/)?python3?$", words[0]) and len(words) > 1:
    if words[1] == "-m" and len(words) > 2:
      return words[2]
    if not words[1].startswith("-"):
      return words[1]
  return words[0]


STATE = ".docs_test_shell"  # the variables a page's blocks set, for its later blocks


def matches(key: str, command: str) -> bool:
  """Whether a marker's PROGRAM key names this command's program or one of its arguments."""
  if program(command) == key:
    return True
  try:
    words = shlex.split(command)
  except ValueError:
    return False
  return any(w == key or w.startswith(key + ":") for w in words[1:])


def script(block: Block) -> str:
  """The bash script that runs a shell block: marker ARGS appended to the commands of
  their programs (before a trailing comment), stopping at the first failure. The shell
  variables earlier blocks of the page set are set again first (a reader's shell keeps
  them: `MINILM=$(...)` in one block, `$MINILM` in the next), and the block's own are
  kept for the blocks after it."""
  lines = ["set -euo pipefail", f"if [ -f {STATE} ]; then source {STATE}; fi"]
  lines += [block.before] if block.before and block.lang != "python" else []
  pending = []
  for line in ([] if block.lang == "python" else block.code.splitlines()):
    pending.append(line)
    if line.endswith("\\"):
      continue
    logical = "".join(l[:-1] if l.endswith("\\") else l for l in pending)
    command = logical[:_comment_at(logical)].strip()
    extra = " ".join(v for k, v in block.args.items() if command and matches(k, command))
    if extra:
      last = pending[-1]
      at = _comment_at(last)
      pending[-1] = f"{last[:at].rstrip()} {extra}" + (f"  {last[at:]}" if at < len(last) else "")
    lines += pending
    pending = []
  lines += pending
  if block.lang == "python":
    lines += ([block.before] if block.before else []) + [f"python {python_file(block)}"]
  assigned = sorted({m.group(1) for c in commands(block.code) if block.lang != "python"
                     for m in [re.match(r"^(?:export\s+)?(\w+)=", c)] if m})
  if assigned:
    lines.append(f"declare -p {' '.join(assigned)} >> {STATE}")
  return "\n".join(lines) + "\n"


def python_file(block: Block) -> str:
  """Where run_page writes a Python block, in the page's directory."""
  return f"block_{block.line}.py"
