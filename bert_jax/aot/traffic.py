"""Where the bytes of a compiled step go: the traffic of each instruction, by category.

The TPU compiler's cost analysis gives one "bytes accessed" per compiled step. This
module splits it over the instructions of the compiled (optimized, per-device) HLO text,
`compiled.as_text()`, counting as XLA's cost analysis does to first order:

* Every top-level instruction of a non-fusion computation (ENTRY, while bodies and
  conditions, called computations, conditional branches) reads its operands and writes
  its result (tuples summed; each array padded to its layout's tile, as the chip stores
  it). Instructions inside a fused computation count nothing: the fusion counts at its
  call site. A fusion parameter only sliced or gathered from counts what is taken (a
  scanned layer's weights out of the [layers, ...] stack, an embedding's rows), the
  buffer a dynamic-update-slice updates in place counts only the update, read and
  written; so do bare slices, gathers and updates.
* get-tuple-element, tuple, bitcast, parameter, constant and the like count 0, and so
  do while/conditional/call themselves: their computations count instead.
* An async pair (copy-start/-done, all-reduce-start/-done, ...) counts once: what the
  -start reads and what the -done writes. libtpu's own model charges a copy pair twice
  that, so a program with many prefetches comes out below its figure.
* Each computation counts as often as it runs per step: a while body times its trip
  count (hlo.while_trips), and of a conditional's branches only the heaviest, the one a
  normal step takes (train/steps.guarded_update on CPU: the update, not the identity).

The compiler counts an array in VMEM (layout memory space S(1), where memory-space
assignment keeps what fits and prefetches into) like one in HBM; hbm_bytes counts only
the arrays in HBM, the traffic that HBM bandwidth limits. Most HBM traffic of an
activation or a weight is then its async copy in or out of VMEM, in "copies / layout";
async_copies_by_served gives those bytes to the instruction they serve (a prefetch: its
first user that moves bytes; an eviction: its source's producer).

Categories come from each instruction's `metadata={op_name="..."}` (a fusion without one:
its fused root's), then its opcode or what it fuses. The first matching rule wins:

1. collectives: all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute,
   or a fusion holding one.
2. copies / layout: copy, transpose, copy-start/-done (a prefetch, an eviction, a layout
   change).
3. remat recompute: op_name under `rematted_computation`, jax's name for the forward
   that jax.checkpoint re-runs inside the backward (the forward itself and the backward
   of a checkpointed layer are `checkpoint/...`). remat_by_category splits it by the
   rules below.
4. attention kernels: splash / flash / dot_product_attention (their dropout, if any,
   never leaves the kernel).
5. dropout masks: Dropout / dropout / _bernoulli / _uniform / threefry / random_bits:
   random bits, masks and their selects (attention dropout written out included).
6. optimizer update: inside a cond (`/cond/`: guarded_update on CPU), an optax name, or outside
   the model's forward and backward (no `jvp(` / `transpose(`): the gradient norm, the
   AdamW update, the step's scalars.
7. layer norm: a module named `*norm*` (layer_norm, attention_norm, mlp_norm, LayerNorm).
8. attention: the rest of an `attention` module (scores, softmax, the attention einsums,
   the layouts the kernels take), not its query/key/value/out projections.
9. embeddings and MLM head / loss: embeddings, the MLM/NSP heads and pooler (the vocab
   matmul), log_softmax, take_along_axis and the loss outside any module (`jvp()/`).
10. dense (matmul): the projections' modules (query, key, value, out, wi, wo, dense:
    their matmuls, bias gradients, weight casts), then any remaining dot / convolution.
11. other.
"""
from __future__ import annotations

import collections
import re

from bert_jax.aot import hlo

CATEGORIES = ("collectives", "copies / layout", "remat recompute", "dropout masks",
              "optimizer update", "layer norm", "attention",
              "embeddings and MLM head / loss", "dense (matmul)", "other")

# Ops that move no bytes themselves (while/conditional/call: their computations count).
_ZERO = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
    "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain", "while",
    "conditional", "call", "async-update"})
# A custom call that only reserves a buffer (a scanned stack's, filled in place later).
_ALLOCATE = 'custom_call_target="AllocateBuffer"'
# An async pair's halves, for opcodes ending in -start / -done (copy, collectives, send...).
_START, _DONE = "-start", "-done"

_NAME = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")
_OP_NAME = re.compile(r'\bop_name="([^"]*)"')
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
_COMMENT = re.compile(r"/\*.*?\*/")
_ARRAY = re.compile(r"\b([a-z]+[0-9]*(?:e[0-9]+m[0-9]+[a-z]*)?)\[([0-9,]*)\](?:\{([^}]*)\})?")
_TILE = re.compile(r":[^T]*T\(([0-9,]+)\)")
_SPACE = re.compile(r"S\((\d+)\)")

# Ops that read only the part of their first operand they return (a slice of a layer
# stack, the rows of an embedding table, the label logits out of the MLM logits).
_TAKES = ("slice", "dynamic-slice", "gather")
_COLLECTIVES = tuple(hlo.KINDS)
_MATMULS = ("dot", "convolution")
_RULES = (  # (category, op_name pattern): rules 3-10 of the module docstring
    ("remat recompute", re.compile(r"rematted_computation")),
    ("attention", re.compile(r"splash|flash|dot_product_attention")),
    ("dropout masks", re.compile(r"[Dd]ropout|_bernoulli|_uniform|threefry|random_bits")),
    ("optimizer update", re.compile(
        r"/cond/|optax|adam|scale_by|global_norm|^jit\([^)]*\)/(?!.*(?:jvp|transpose)\()")),
    ("layer norm", re.compile(r"/\w*[Nn]orm\w*/")),
    ("attention", re.compile(
        r"/attention/(?!(?:query|key|value|out|qkv|attention\.keys_values)/)")),
    ("embeddings and MLM head / loss", re.compile(
        r"embed|mlm_head|nsp_head|pooler|log_softmax|logsumexp|take_along_axis|cross_entropy"
        r"|(?:jvp|transpose\(jvp)\(\)\)?/")),
    ("dense (matmul)", re.compile(r"/(?:query|key|value|out|qkv|wi|wo|dense)/")),
)


def _operands(line: str, start: int) -> list[str]:
  """Names of the operands listed from `start` (just after the opcode's parenthesis)."""
  depth, end = 1, start
  while end < len(line) and depth:
    depth += {"(": 1, ")": -1}.get(line[end], 0)
    end += 1
  text = _COMMENT.sub("", line[start:end - 1])
  if "%" in text:
    return re.findall(r"%([\w.\-]+)", text)
  return [piece.split()[-1] for piece in text.split(",") if piece.strip()]


def _instructions(comps: dict) -> dict:
  """{computation: [(name, opcode, result type, operand names, line)]}."""
  out = {}
  for comp, instrs in comps.items():
    rows = []
    for opcode, type_text, line in instrs:
      m = hlo._INSTR.match(line)  # pylint: disable=protected-access  (hlo's own regex)
      rows.append((_NAME.match(line).group(1), opcode, type_text,
                   _operands(line, m.end()), line))
    out[comp] = rows
  return out


def array_bytes(type_text: str) -> tuple[int, int]:
  """(bytes, bytes in HBM) of an HLO type, one array or a tuple of them, each padded to
  its layout's tile as the chip stores it (f32[2,64]{1,0:T(2,128)}: 2 x 128 floats).
  An array in another memory space (S(1): VMEM, where memory-space assignment puts the
  copies it prefetches; S(2), S(6): scalar memories) counts in bytes but not in HBM."""
  total = hbm = 0.0
  for dtype, dims, layout in _ARRAY.findall(type_text):
    if dtype not in hlo._DTYPE_BYTES:  # pylint: disable=protected-access  (token, ...)
      continue
    shape = [int(d) for d in dims.split(",") if d]
    order = [int(d) for d in layout.split(":")[0].split(",") if d] if layout else []
    tile = _TILE.search(layout)
    if tile and len(order) == len(shape):
      # physical dims, major to minor, with leading 1s up to the tile's rank
      tile_dims = [int(t) for t in tile.group(1).split(",")]
      physical = [shape[i] for i in reversed(order)]
      physical = [1] * (len(tile_dims) - len(physical)) + physical
      for k, t in enumerate(reversed(tile_dims), start=1):
        physical[-k] = -(-physical[-k] // t) * t
      shape = physical
    n = 1
    for d in shape:
      n *= d
    nbytes = n * hlo._DTYPE_BYTES[dtype]  # pylint: disable=protected-access
    total += nbytes
    space = _SPACE.search(layout)
    hbm += nbytes if not space or space.group(1) == "0" else 0
  return int(total), int(hbm)


def _fused_io(fused: list) -> tuple[dict, int | None]:
  """What a fusion of the computation `fused` really touches: ({parameter index: bytes
  it reads} for the parameters only taken from (_TAKES) or only updated in place (the
  buffer of a dynamic-update-slice: 0), and the bytes it writes when a root is such an
  update (the update's, not the whole buffer's), else None)."""
  by_name, users = {r[0]: r for r in fused}, _users(fused)

  def uses(n):  # (user, the operand it uses), through bitcasts
    return [x for u in users[n] for x in (
        uses(u) if by_name[u][1] == "bitcast" else [(by_name[u], n)])]

  reads = {}
  for name, opcode, _, _, line in fused:
    index = re.search(r"parameter\((\d+)\)", line) if opcode == "parameter" else None
    if not index or not uses(name):
      continue
    if all(u[1] in _TAKES and u[3][0] == n for u, n in uses(name)):
      reads[int(index.group(1))] = sum(array_bytes(u[2])[0] for u, _ in uses(name))
    elif all(u[1] == "dynamic-update-slice" and u[3][0] == n for u, n in uses(name)):
      reads[int(index.group(1))] = 0
  leaves, queue = [], [fused[-1]] if fused else []
  while queue:
    r = queue.pop()
    if r[1] in ("tuple", "bitcast"):
      queue += [by_name[o] for o in r[3] if o in by_name]
    else:
      leaves.append(r)
  if not any(r[1] == "dynamic-update-slice" for r in leaves):
    return reads, None
  return reads, sum(array_bytes(by_name[r[3][1]][2] if r[1] == "dynamic-update-slice"
                                else r[2])[0] for r in leaves)


def _own_bytes(row: tuple, types: dict, rows: dict) -> tuple[int, int]:
  """(bytes, HBM bytes) one run of an instruction reads and writes (module docstring)."""
  _, opcode, type_text, operands, line = row
  if opcode in _ZERO or (opcode == "custom-call" and _ALLOCATE in line):
    return 0, 0
  read = [array_bytes(types.get(o, "")) for o in operands]
  write = array_bytes(type_text)
  if opcode.endswith(_START):
    return sum(r[0] for r in read), sum(r[1] for r in read)
  if opcode.endswith(_DONE):
    return write
  if opcode in _TAKES and read:  # operand 0: what it takes; the indices as they are
    read = [write] + read[1:]
  if opcode == "dynamic-update-slice" and len(read) > 1:  # in place: the update, twice
    read, write = read[1:], read[1]
  if opcode == "fusion":
    callee = _CALLS.search(line)
    reads, written = _fused_io(rows.get(callee.group(1), []) if callee else [])
    read = [(reads[i], r[1] and reads[i]) if i in reads and r[0] else r
            for i, r in enumerate(read)]
    if written is not None:
      write = (written, write[1] and written)
  return (sum(r[0] for r in read) + write[0], sum(r[1] for r in read) + write[1])


def _op_name(line: str, opcode: str, rows: dict) -> str:
  """The instruction's op_name, or for a fusion without one its fused root's."""
  m = _OP_NAME.search(line)
  if m or opcode != "fusion":
    return m.group(1) if m else ""
  callee = _CALLS.search(line)
  fused = rows.get(callee.group(1), []) if callee else []
  for _, _, _, _, inner in reversed(fused):  # the root is printed last
    m = _OP_NAME.search(inner)
    if m:
      return m.group(1)
  return ""


def _fused_opcodes(line: str, rows: dict) -> set:
  callee = _CALLS.search(line)
  return {r[1] for r in rows.get(callee.group(1), ())} if callee else set()


def category(opcode: str, op_name: str, fused: set = frozenset(), skip_remat=False) -> str:
  """The first rule of the module docstring that matches an instruction."""
  base = opcode[:-len(_START)] if opcode.endswith(_START) else (
      opcode[:-len(_DONE)] if opcode.endswith(_DONE) else opcode)
  if base in _COLLECTIVES or fused & set(_COLLECTIVES) or any(
      f.endswith((_START, _DONE)) and f.rsplit("-", 1)[0] in _COLLECTIVES for f in fused):
    return "collectives"
  if base in ("copy", "transpose"):
    return "copies / layout"
  for name, pattern in _RULES:
    if name == "remat recompute" and skip_remat:
      continue
    if op_name and pattern.search(op_name):
      return name
  if base in _MATMULS or fused & set(_MATMULS):
    return "dense (matmul)"
  return "other"


def _users(instrs: list) -> dict:
  users = collections.defaultdict(list)
  for r in instrs:
    for o in r[3]:
      users[o].append(r[0])
  return users


def _copy_served(name: str, by_name: dict, users: dict, own: dict, cats: dict) -> str:
  """The category an async copy (copy-start or copy-done `name`) serves: a prefetch into
  VMEM, its first user that moves bytes; an eviction to HBM, its source's producer (the
  other one when the first is a parameter or a loop); else "copies / layout"."""
  row = by_name[name]
  done = name if row[1] == "copy-done" else next(
      (u for u in users[name] if by_name[u][1] == "copy-done"), None)
  start = row[3][0] if row[1] == "copy-done" and row[3] else name
  passing = _ZERO | {"copy-start", "copy-done"}

  def search(first, step):  # breadth first through the ops that move nothing
    queue, seen = list(first), set()
    while queue:
      n = queue.pop(0)
      if n in seen or n not in by_name:
        continue
      seen.add(n)
      if by_name[n][1] not in passing and own.get(n, (0, 0))[0]:
        return cats[n]
      queue += step(n)
    return None

  downstream = search(users[done] if done else [], lambda n: users[n])
  upstream = search(by_name[start][3] if start in by_name else [],
                    lambda n: by_name[n][3])
  prefetch = done is not None and not array_bytes(by_name[done][2])[1]
  found = (downstream or upstream) if prefetch else (upstream or downstream)
  return found or "copies / layout"


def _runs(comps: dict, entry: str, cost) -> dict:
  """{computation: times per step} over the non-fusion computations reached from ENTRY:
  while bodies and conditions (times their trip count), called computations, and of a
  conditional's branches the heaviest by `cost(computation)`."""
  runs = collections.Counter()

  def visit(comp, times, depth=0):
    if depth > 64 or comp not in comps:
      return
    runs[comp] += times
    for opcode, _, line in comps[comp]:
      if opcode == "while":
        trips = hlo.while_trips(comps, line) or 1
        for key in ("body", "condition"):
          m = re.search(rf"\b{key}=%?([\w.\-]+)", line)
          if m:
            visit(m.group(1), times * trips, depth + 1)
      elif opcode == "call":
        m = re.search(r"\bto_apply=%?([\w.\-]+)", line)
        if m:
          visit(m.group(1), times, depth + 1)
      elif opcode == "conditional":
        branches = re.findall(r"\b(?:true|false)_computation=%?([\w.\-]+)", line)
        for group in hlo._BRANCHES.findall(line):  # pylint: disable=protected-access
          branches += re.findall(r"%?([\w.\-]+)", group)
        if branches:
          visit(max(branches, key=cost), times, depth + 1)

  visit(entry, 1)
  return runs


def bytes_by_category(hlo_text: str, top: int = 20) -> dict:
  """Bytes one step moves on one device, by category and by instruction.

  Returns {"total_bytes", "by_category": {category: bytes per step} over CATEGORIES,
  "hbm_bytes", "hbm_by_category": the same counting only arrays in HBM (array_bytes),
  "remat_by_category": the remat recompute's bytes by what the recomputed op is,
  "async_copies_by_served": the HBM bytes of copy-start/-done by what they serve,
  "top": the `top` largest instructions by bytes per step, each {"name", "opcode",
  "category", "bytes" (per step), "hbm_bytes", "count" (runs per step), "op_name"}}.
  """
  comps, entry = hlo.parse(hlo_text)
  if entry is None:
    raise ValueError("no ENTRY computation in the HLO text")
  rows = _instructions(comps)
  own = {}  # computation -> [(row, (bytes, HBM bytes) per run)]
  for comp, instrs in rows.items():
    types = {name: type_text for name, _, type_text, _, _ in instrs}
    own[comp] = [(r, _own_bytes(r, types, rows)) for r in instrs]
  memo = {}

  def cost(comp, depth=0):  # bytes of one run of `comp`, its loops and branches included
    if comp not in memo:
      sub = _runs(comps, comp, lambda c: cost(c, depth + 1)) if depth < 8 else {comp: 1}
      memo[comp] = sum(times * b[0] for c, times in sub.items() for _, b in own.get(c, ()))
    return memo[comp]

  runs = _runs(comps, entry, cost)
  by_cat, hbm_cat = dict.fromkeys(CATEGORIES, 0), dict.fromkeys(CATEGORIES, 0)
  remat = dict.fromkeys(CATEGORIES[3:], 0)
  copies = dict.fromkeys(CATEGORIES, 0)
  items = []
  for comp, times in runs.items():
    cats, names, recomputed = {}, {}, {}
    for (name, opcode, _, _, line), _ in own[comp]:
      names[name] = op_name = _op_name(line, opcode, rows)
      fused = _fused_opcodes(line, rows) if opcode == "fusion" else set()
      cats[name] = category(opcode, op_name, fused)
      if cats[name] == "remat recompute":
        recomputed[name] = category(opcode, op_name, fused, skip_remat=True)
    sizes = {r[0]: b for r, b in own[comp]}
    by_name, users = {r[0]: r for r in rows[comp]}, _users(rows[comp])
    for (name, opcode, _, _, _), (nbytes, hbm) in own[comp]:
      if not nbytes:
        continue
      cat = cats[name]
      by_cat[cat] += times * nbytes
      hbm_cat[cat] += times * hbm
      if cat == "remat recompute":
        remat[recomputed[name]] += times * nbytes
      if opcode in ("copy-start", "copy-done"):
        copies[_copy_served(name, by_name, users, sizes, cats)] += times * hbm
      items.append({"name": name, "opcode": opcode, "category": cat,
                    "bytes": times * nbytes, "hbm_bytes": times * hbm, "count": times,
                    "op_name": names[name]})
  items.sort(key=lambda d: -d["bytes"])
  return {"total_bytes": sum(by_cat.values()), "by_category": by_cat,
          "hbm_bytes": sum(hbm_cat.values()), "hbm_by_category": hbm_cat,
          "remat_by_category": remat, "async_copies_by_served": copies, "top": items[:top]}
