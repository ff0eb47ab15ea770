"""The measured figures of a Markdown page, and whether each one says where it comes from.

A figure is a number with a unit of memory, time, rate or ratio (`6.08 GiB`, `8 min`,
`198,111 seq/s`, `20%`, `1.87x`, ranges such as `3-6x` included) or a score after its
metric's name (`BLEU 100.0`, `accuracy 0.700`, `perplexity 194`). Outside fenced blocks,
inline code and HTML comments, each figure of a page is one of:

1. Quoted from a result. Either the figure is the text of a link to that result's section
   of bench/RESULTS.md,
       `[8 min 18 s](../bench/RESULTS.md#make-demo-from-a-fresh-clone)`,
   or its sentence (a table row counts as one) links the section:
       `trained in 1.4 min ([bench/RESULTS.md](../bench/RESULTS.md#translation-numbers-task))`.
   The quoted text must stand in that section, or in its row of RESULTS' summary table, as
   RESULTS.md prints it, between word boundaries (`0.7` does not quote `0.700`; bold,
   `\\|` escapes and the space in `20 %`, `1.08 x` aside; of a score, its number). A
   result measured again and rendered again therefore fails every page that still quotes
   the old figure. A link's text is a quoted figure when it holds a number of its own
   (`S512` and `word2vec` are names), except in a table row's first cell, the row's name.
   In a sentence that cites sections, every figure must stand in one of them unless it
   carries its own date (2.).
2. Dated: a figure with no result file (measured once, in a design note) names a date
   (YYYY-MM-DD) and the hardware (`2-core AMD EPYC`, `v5e:4x4`, `H100` ...) in its own
   parenthesis (`~1.5 min (2-core CPU, 2026-11-22)`) or, in a sentence that cites no
   result, anywhere in its paragraph (a list item, a table are paragraphs of their own).
3. Not a measurement: a setting, a limit, a goal or an estimate. A figure right after
   `<=`, `>=`, `<`, `>`, `default`, `goal`, `target`, `threshold` or `timeout` is one, so
   is every figure of a sentence (a table) that says `estimated`, `expected` or `an
   estimate`; CONFIG_VALUES lists the few other phrases, each a setting.

`problems(page_text, page, results_text)` names each figure that is none of these.
"""
from __future__ import annotations

import os
import re

RESULTS_PATH = "bench/RESULTS.md"

_NUMBER = r"~?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?"
_UNITS = (r"GiB|MiB|KiB|GB|MB|TB|GFLOP/s|TFLOP/s|seq/s|sequences/s|examples/s|tokens/s|"
          r"tokens/CPU-s|sentences/s|words/s|documents/s|bytes|ms|s|seconds|min|minutes|h|"
          r"hours|days|%|MFU|BLEU")
_SCORES = (r"BLEU|sacreBLEU|chrF|accuracy|perplexity|MFU|Spearman|WS353|WordSim-353|"
           r"SimLex|SimLex-999|F1|exact match")
_WITH_UNIT = re.compile(
    rf"(?<![\w.\-/]){_NUMBER}(?:\s?(?:{_UNITS})(?![\w/])|x(?![\w/])|\sx(?= faster| slower)|"
    rf"\s(?:sequences|examples|tokens|sentences|words|steps) (?:a|per) second)")
_SCORE = re.compile(rf"\b(?:{_SCORES})\s(?:of\s)?~?(\d+(?:\.\d+)?)")
# A figure right after one of these words or signs is a setting, a limit or a goal.
_STATED = re.compile(r"(?:<=|>=|≤|≥|<|>|\bdefault|\bgoal|\btargets?|\bthreshold|\btimeout)"
                     r"[\s:]*(?:of\s|is\s)?$")
# Settings and limits that read like measurements (regular expressions around a figure).
CONFIG_VALUES = (
    r"\d+% mask(?:s|ing)\b", r"validation split's 15%", r"\(15%; the demo 30%\)",
    r"\d+% warmup", r"seq 128 for 90%", r"preallocates 75%", r"heartbeat \d+ s\b",
    r"both \d+ s apart", r"after \d+ s idle", r"\d+-s slices", r"\d+ minutes old",
    r"\(1, 2 s\)", r"over \d+ MiB", r"\d+ KiB at a time", r"a \d+ GiB trim",
    r"over 0\.3 s", r"threshold is 1 s", r"\d+ minutes of training clock",
    r"capacity \(v4 32 GiB", r"\b0 bytes lost", r"an error after \d+ s\b",
)
# A sentence (a whole table) that calls its figures estimates: they are not measurements.
_ESTIMATE = re.compile(r"\b(?:an estimate|estimated|expected)\b", re.I)
_DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
# A figure followed by its own parenthesis naming a date and the hardware: `~1.5 min
# (2-core CPU, 2026-11-22)`.
_OWN_DATE = re.compile(r"(?:\s+[\w'-]+){0,3}\s*\([^()]*\b20\d\d-\d\d-\d\d\b[^()]*\)")
# A link's text quotes a figure when it holds a number of its own (not `S512`, `v5e`).
_QUOTED = re.compile(r"(?<![\w.])\d")
_HARDWARE = re.compile(r"\d+-core|\bcores?\b|\bCPUs?\b|EPYC|Xeon|Sapphire Rapids|\bVM\b|"
                       r"\bTPU|\bv[456][ep]?\b|v[456][ep]?[-:]\d|\bGPUs?\b|H100|H200|A100|"
                       r"libtpu")
_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")


def figures(text: str) -> list[tuple[int, int, str]]:
  """(start, end, what to look for in RESULTS) of each figure of `text`: the number and
  its unit, or a score's number (the metric's name is the page's own wording)."""
  out = [(m.start(), m.end(), m.group(0).lstrip("~")) for m in _WITH_UNIT.finditer(text)]
  for m in _SCORE.finditer(text):
    if not any(s <= m.start(1) < e for s, e, _ in out):
      out.append((m.start(), m.end(), m.group(1)))
  return sorted(out)


def slug(title: str) -> str:
  """GitHub's anchor of a heading (tests/test_docs.py's rule; RESULTS' are unique)."""
  return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _plain(text: str) -> str:
  """Bold and `\\|` escapes dropped, spaces collapsed, `20 %` and `1.08 x` as `20%`, `1.08x`."""
  text = " ".join(text.replace("**", "").replace("\\|", "|").split())
  return re.sub(r"(\d) (%|x)(?![\w/])", r"\1\2", text)


def sections(results_text: str) -> dict[str, str]:
  """RESULTS.md's anchor -> its section's text and its summary row, as plain text."""
  parts = re.split(r"^## ", results_text, flags=re.M)
  out = {slug(p.splitlines()[0]): p for p in parts[1:]}
  for row in parts[0].splitlines():
    link = re.match(r"\| \[[^\]]*\]\(#([^)]+)\)", row)
    if link and link.group(1) in out:
      out[link.group(1)] += "\n" + row
  return {k: _plain(v) for k, v in out.items()}


def quotes(section: str, figure: str) -> bool:
  """`figure` stands in `section` between word boundaries."""
  figure = _plain(figure)
  left = r"(?<![\w.])" if figure[:1].isalnum() else ""
  right = r"(?![\w])" if figure[-1:].isalnum() else ""
  return re.search(left + re.escape(figure) + right, section) is not None


def paragraphs(text: str):
  """(sentences, whole text) of each paragraph, list item, heading and table outside
  fenced blocks (HTML comment lines left out); sentences as (line number, text): a
  table's are its rows, a paragraph's its sentences."""
  block, fenced = [], False  # block: (line number, stripped line)

  def done():
    if block[0][1].startswith("|"):
      return block[:], "\n".join(line for _, line in block)
    whole, starts = "", []  # starts: (offset in whole, line number)
    for number, line in block:
      starts.append((len(whole), number))
      whole += line + " "
    sentences, pos = [], 0
    for cut in [m.end() for m in _SENTENCE_END.finditer(whole)] + [len(whole)]:
      number = max(n for offset, n in starts if offset <= pos)
      sentences.append((number, whole[pos:cut].strip()))
      pos = cut
    return sentences, whole.strip()

  for number, line in enumerate(text.splitlines() + [""], 1):
    stripped = line.strip()
    if stripped.startswith("```"):
      fenced = not fenced
    skip = fenced or stripped.startswith(("```", "<!--")) or not stripped
    table = stripped.startswith("|")
    opens = (stripped.startswith("#") or re.match(r"([-*+]|\d+\.)\s", stripped) or
             (block and table != block[0][1].startswith("|")))
    if (skip or opens) and block:
      yield done()
      block = []
    if skip:
      continue
    block.append((number, stripped))
    if stripped.startswith("#"):
      yield done()
      block = []


def _results_anchor(target: str, page: str) -> str:
  """The anchor of a link to a section of bench/RESULTS.md from `page`, else ''."""
  path, _, anchor = target.partition("#")
  if not path or target.startswith(("http://", "https://")):
    return ""
  where = os.path.normpath(os.path.join(os.path.dirname(page), path)).replace(os.sep, "/")
  return anchor if where == RESULTS_PATH else ""


def _stated(sentence: str, start: int, end: int) -> bool:
  if _STATED.search(sentence[:start]):
    return True
  return any(m.start() <= start and end <= m.end()
             for phrase in CONFIG_VALUES for m in re.finditer(phrase, sentence))


def _dated_here(sentence: str, start: int, end: int) -> bool:
  """The figure is followed by, or stands in, a parenthesis naming a date and hardware."""
  after = _OWN_DATE.match(sentence, end)
  if after:
    around = after.group(0)
  else:
    opens, closes = sentence.rfind("(", 0, start), sentence.find(")", end)
    if opens < 0 or closes < 0 or ")" in sentence[opens:start] or "(" in sentence[end:closes]:
      return False
    around = sentence[opens:closes + 1]
  return bool(_DATE.search(around) and _HARDWARE.search(around))


def problems(page_text: str, page: str, results_text: str) -> list[str]:
  """One line per figure of `page_text` that is neither quoted as its result prints it,
  nor dated, nor a setting. `page` is the page's path from the repository root (links
  are relative to it)."""
  found = sections(results_text)
  out = []
  for sentences, whole in paragraphs(page_text):
    whole = re.sub(r"`[^`]*`", "`…`", whole)
    dated = bool(_DATE.search(whole) and _HARDWARE.search(whole))
    table_estimate = whole.startswith("|") and bool(_ESTIMATE.search(whole))
    for number, sentence in sentences:
      sentence = re.sub(r"`[^`]*`", "`…`", sentence)  # inline code: program text
      name = len(sentence.split(" | ")[0]) if sentence.startswith("|") else 0
      cited, plain, pos = [], [], 0
      for link in _LINK.finditer(sentence):
        plain.append(sentence[pos:link.start()])
        pos = link.end()
        anchor, text = _results_anchor(link.group(2), page), link.group(1)
        if anchor:
          cited.append(anchor)
          if link.start() >= name and _QUOTED.search(text):  # a quoted figure
            if anchor not in found:
              out.append(f"{page}:{number}: {text!r} links RESULTS#{anchor}: no such section")
            elif not quotes(found[anchor], text):
              out.append(f"{page}:{number}: {text!r} is not what RESULTS#{anchor} says")
            plain.append("…")
            continue
        plain.append(text)
      plain = "".join(plain + [sentence[pos:]])
      if table_estimate or _ESTIMATE.search(plain):
        continue
      for start, end, figure in figures(plain):
        if _stated(plain, start, end) or _dated_here(plain, start, end):
          continue
        if cited:
          if not any(quotes(found.get(a, ""), figure) for a in cited):
            out.append(f"{page}:{number}: {figure!r} is not in RESULTS#{' or #'.join(cited)}, "
                       "which its sentence cites")
        elif not dated:
          out.append(f"{page}:{number}: {plain[start:end]!r} cites no section of "
                     "bench/RESULTS.md, and its paragraph names no date and hardware")
  return out
