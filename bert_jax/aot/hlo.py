"""Collectives of a compiled (optimized, per-device) HLO module: count and bytes per step.

The text is `compiled.as_text()`. A collective inside a while loop (a scanned layer
stack, gradient accumulation) runs once per iteration, so each computation's count is
multiplied by how often it runs per step: the known trip counts XLA records on while
loops (or, on TPU, the `counter < N` of the loop's condition), propagated from ENTRY through every call site (while bodies, calls, fusions,
conditional branches, each branch counted as taken).

Bytes are those of each collective's result on one device (for an async pair, of the
`-done`): for all-reduce the reduced array, for all-gather the gathered one, for
reduce-scatter the scattered shard. The bytes a ring actually moves follow from them:
all-reduce ~2(n-1)/n x, all-gather (n-1)/n x, reduce-scatter (n-1) x.
"""
from __future__ import annotations

import collections
import re

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

_DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2,
                "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8,
                "f64": 8, "c64": 8, "c128": 16}
_SHAPE = re.compile(r"\b([a-z]+[0-9]*(?:e[0-9]+m[0-9]+[a-z]*)?)\[([0-9,]*)\]")
_COMP_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(.*?)\s+([a-z][\w\-]*)\(")
_CALLEES = re.compile(
    r"\b(?:body|condition|to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')


def compiled_text(compiled) -> tuple[str | None, str]:
  """(HLO text of a compiled executable, "") or (None, why XLA could not print it).

  Seen with jax 0.10.2 + libtpu 0.0.52 on v5p topologies: the executable runs the
  compiler's memory analysis fine, but converting its HLO proto back to text fails a
  RET_CHECK on an async-update instruction. The rest of the report does not need it.
  """
  try:
    return compiled.as_text(), ""
  except Exception as e:  # pylint: disable=broad-except  (jax.errors.JaxRuntimeError)
    return None, str(e).strip().splitlines()[0][:300]


def shape_bytes(type_text: str) -> int:
  """Bytes of an HLO result type: one array or a tuple of them (layouts ignored)."""
  total = 0.0
  for dtype, dims in _SHAPE.findall(type_text):
    if dtype not in _DTYPE_BYTES:
      continue
    n = 1
    for d in filter(None, dims.split(",")):
      n *= int(d)
    total += n * _DTYPE_BYTES[dtype]
  return int(total)


def parse(text: str):
  """{computation: [(opcode, result type, line)]}, the ENTRY name.

  An instruction printed over several lines (a Mosaic kernel's kernel_metadata holds
  newlines) is one entry, its continuation lines joined onto its first."""
  comps, entry, current = {}, None, None
  for line in text.splitlines():
    header = _COMP_HEADER.match(line)
    if header and not line[:1].isspace():  # headers start at column 0, instructions indented
      current = header.group(2)
      comps[current] = []
      if header.group(1):
        entry = current
      continue
    if current is None:
      continue
    if line.strip() == "}":
      current = None
      continue
    m = _INSTR.match(line)
    if m:
      comps[current].append((m.group(2), m.group(1), line))
    elif comps[current]:
      opcode, type_text, first = comps[current][-1]
      comps[current][-1] = (opcode, type_text, first + "\n" + line)
  return comps, entry


def _condition_trip_count(instrs) -> int | None:
  """N of a `counter < N` loop condition (a scan's: counter from 0, step 1), else None.

  TPU executables do not carry the known_trip_count backend config, so the count is
  read off the condition computation: one integer constant and a LT comparison.
  """
  consts = [int(m.group(1)) for op, _, line in instrs if op == "constant"
            for m in [re.search(r"constant\((\d+)\)", line)] if m]
  less = [line for op, _, line in instrs if op == "compare" and "direction=LT" in line]
  return consts[0] if len(consts) == 1 and len(less) == 1 else None


def while_trips(comps: dict, line: str) -> int | None:
  """Iterations of a while instruction (its text `line`) per run, None when unknown."""
  trip = _TRIP.search(line)
  if trip:
    return int(trip.group(1))
  cond = re.search(r"\bcondition=%?([\w.\-]+)", line)
  return _condition_trip_count(comps.get(cond.group(1), ())) if cond else None


def _executions(comps: dict, entry: str) -> dict:
  """{computation: times it runs per call of ENTRY}."""
  edges = collections.defaultdict(list)   # caller -> [(callee, factor)]
  for name, instrs in comps.items():
    for opcode, _, line in instrs:
      trips = while_trips(comps, line) if opcode == "while" else None
      for callee in _CALLEES.findall(line):
        is_body = opcode == "while" and re.search(rf"\bbody=%?{re.escape(callee)}(?![\w.\-])", line)
        factor = (trips or 1) if is_body else 1
        edges[name].append((callee, factor))
      for group in _BRANCHES.findall(line):
        for callee in re.findall(r"%?([\w.\-]+)", group):
          edges[name].append((callee, 1))
  runs = collections.Counter()

  def visit(name, times, depth=0):
    if depth > 64 or name not in comps:
      return
    runs[name] += times
    for callee, factor in edges.get(name, ()):
      visit(callee, times * factor, depth + 1)

  visit(entry, 1)
  return runs


def collectives(text: str) -> dict:
  """{kind: {"count": per step, "bytes": per step per device}} for each kind in KINDS."""
  comps, entry = parse(text)
  if entry is None:
    raise ValueError("no ENTRY computation in the HLO text")
  runs = _executions(comps, entry)
  out = {k: {"count": 0, "bytes": 0} for k in KINDS}
  # TPU executables hold an async collective twice (the fusion that starts it and the
  # one that finishes it), as clones with one channel_id: count each channel once.
  seen = {}
  for name, instrs in comps.items():
    for opcode, type_text, line in instrs:
      kind = opcode[:-len("-done")] if opcode.endswith("-done") else opcode
      if kind not in out or opcode.endswith("-start") or not runs[name]:
        continue
      channel = re.search(r"\bchannel_id=(\d+)", line)
      key = (kind, channel.group(1)) if channel else (kind, name, line)
      seen[key] = max(seen.get(key, (0, 0)), (runs[name], shape_bytes(type_text)))
  for (kind, *_), (times, nbytes) in seen.items():
    out[kind]["count"] += times
    out[kind]["bytes"] += times * nbytes
  return out
