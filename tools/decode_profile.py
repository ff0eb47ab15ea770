"""A decode step op by op: where the time of greedy, beam 4 and GPT batch-16 steps goes.

  /work/main/.venv/bin/python tools/decode_profile.py --case greedy|beam|gpt16 [--steps N]

Runs one whole generation (the same models and shapes as bench/inference/decode.py and
bench/inference/generate.py) under `jax.profiler.trace` and sums XLA:CPU's per-thunk events by
operation (fusion / custom call / copy) name. Each name is tagged "matmul" if the HLO
computation it runs contains a `dot` (XLA may fuse a bias add or activation into it), else
"other". Prints the top costs with their share of the loop's wall time per step, and the
step's wall time over its matmul time (the #29 goal: <= 1.3x).
"""
from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path[:0] = [os.path.join(ROOT, "bench"), os.path.join(ROOT, "bench", "inference")]


def _case(name: str, steps: int, matmul_dtype: str | None = None):
  """A no-argument function running one generation of the case."""
  import jax
  import jax.numpy as jnp
  import numpy as np
  from bert_jax import decoding
  if name in ("greedy", "beam"):
    import decode as bench_decode  # bench/inference/decode.py: the same model
    args = argparse.Namespace(src_len=steps, new_tokens=steps, batch=32, scan=False,
                              matmul_dtype=matmul_dtype)
    model, params, src, mask = bench_decode.build_ours(args)
    kw = dict(method="greedy") if name == "greedy" else dict(method="beam", beam_size=4)
    fn = lambda: decoding.seq2seq_generate(model, params, src, mask, max_len=steps,
                                           bos_id=1, eos_id=None, alpha=0.6, extra_len=None,
                                           **kw)
    return fn
  from bert_jax.models.gpt import GPT
  from bert_jax.models.variants import get_model_config
  cfg = get_model_config("gpt/small", vocab_size=50257, max_len=1024, hidden_size=768,
                         num_layers=12, num_heads=12, deterministic=True,
                         matmul_dtype=matmul_dtype)
  model = GPT(cfg)
  params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  batch = 16 if name == "gpt16" else 1
  prompt = jnp.asarray(np.random.default_rng(0).integers(0, 50257, (batch, 32)), jnp.int32)
  lengths = jnp.full((batch,), 32, jnp.int32)
  return lambda: decoding.gpt_generate(model, params, prompt, lengths,
                                       max_new_tokens=steps, temperature=0.0)


_COMP = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT )?%?([\w.\-]+) = ")


def _hlo_ops(hlo: str) -> dict[str, tuple[str, bool, bool]]:
  """{instruction name: (source op it comes from, whether it computes a dot, in the loop)}.

  The source op is the instruction's jax op_name metadata with the jit/while prefix and
  the layer number dropped (".../layers_*/mlp/wi/dot_general"), so the 6 or 12 layers'
  copies of one op add up to one row.
  """
  bodies, current = {}, None
  for line in hlo.splitlines():
    m = _COMP.match(line)
    if m:
      current = m.group(1)
      bodies[current] = []
    elif current is not None:
      bodies[current].append(line)
  with_dot = {c for c, lines in bodies.items() if any(re.search(r"\bdot\(", l) for l in lines)}
  # The loop's computations: while bodies/conditions and what they call, transitively.
  loop, todo = set(), [m for lines in bodies.values() for l in lines if " while(" in l
                       for m in re.findall(r"(?:body|condition)=%?([\w.\-]+)", l)]
  while todo:
    c = todo.pop()
    if c not in loop and c in bodies:
      loop.add(c)
      todo += [m for l in bodies[c] for m in re.findall(
          r"(?:body|condition|to_apply|calls)=%?([\w.\-]+)", l)]
  ops = {}
  for comp, lines in bodies.items():
    for l in lines:
      name = _INSTR.match(l)
      if not name:
        continue
      calls = re.search(r"calls=%?([\w.\-]+)", l)
      is_dot = bool(re.search(r"\bdot\(", l)) or bool(
          calls and calls.group(1) in with_dot and " while(" not in l)
      src = re.search(r'op_name="([^"]*)"', l)
      src = src.group(1) if src else name.group(1)
      src = re.sub(r"^jit\([^)]*\)/", "", src)
      in_loop = comp in loop
      src = re.sub(r"^(while/body/|while/cond/)+", "", src)
      src = re.sub(r"layers_\d+", "layers_*", src)
      ops[name.group(1)] = (src, is_dot, in_loop)
  return ops


def with_hlo_dump(prefix: str) -> None:
  """Re-executes this script with XLA dumping every program's optimized HLO as text into
  a new directory (os.environ["XLA_DUMP"] in the new process), unless that is done: the
  dump is what tags each thunk with its jax op (_hlo_ops). No compilation cache, so every
  program is compiled (and dumped) here."""
  if "XLA_DUMP" in os.environ:
    return
  dump = tempfile.mkdtemp(prefix=prefix)
  env = dict(os.environ, XLA_DUMP=dump, JAX_PLATFORMS="cpu",
             XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={dump} "
                        "--xla_dump_hlo_as_text --xla_dump_hlo_pass_re=^$").strip())
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  os.execve(sys.executable, [sys.executable] + sys.argv, env)


def profile(case: str, steps: int, top: int = 10, matmul_dtype: str | None = None) -> dict:
  import jax
  fn = _case(case, steps, matmul_dtype)
  jax.block_until_ready(fn())                                  # compile + warm up
  start = time.perf_counter()
  jax.block_until_ready(fn())
  wall = time.perf_counter() - start
  ops = {}  # names repeat across modules: read the generate program's only
  for f in glob.glob(os.path.join(os.environ["XLA_DUMP"], "*generate*after_optimizations.txt")):
    with open(f, encoding="utf-8") as fh:
      ops.update(_hlo_ops(fh.read()))
  trace_dir = tempfile.mkdtemp(prefix="decode_profile_")
  jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
  jax.block_until_ready(fn())
  jax.profiler.stop_trace()
  path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
  events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
  # The decode loop: the thunks of the while body (metadata "while/body/..."), from the
  # first one's start to the last one's end.
  module = f"jit_{'seq2seq' if case in ('greedy', 'beam') else 'gpt'}_generate"
  inside = [e for e in events if e.get("args", {}).get("hlo_module") == module
            and e["name"] in ops and ops[e["name"]][2]]
  loop_s = (max(e["ts"] + e["dur"] for e in inside) - min(e["ts"] for e in inside)) / 1e6
  before = sorted(((ops[e["name"]][0], e["dur"] / 1e3) for e in events
                   if e.get("args", {}).get("hlo_module") == module and e["name"] in ops
                   and not ops[e["name"]][2]), key=lambda r: -r[1])
  print("outside the loop (ms):", round(sum(t for _, t in before), 1),
        [(n[-60:], round(t, 1)) for n, t in before[:8]], file=sys.stderr)
  per_src, calls = collections.Counter(), collections.Counter()
  matmul = 0.0
  for e in inside:
    src, is_dot, _ = ops[e["name"]]
    per_src[(src, is_dot)] += e["dur"] / 1e6
    calls[(src, is_dot)] += 1
    matmul += e["dur"] / 1e6 if is_dot else 0.0
  rows = [dict(op=src, kind="matmul" if d else "other", seconds=t, calls=calls[(src, d)],
               share=t / loop_s) for (src, d), t in per_src.most_common(top)]
  return dict(case=case, steps=steps, wall=wall, loop=loop_s,
              ops=sum(per_src.values()), matmul=matmul, rows=rows)


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--case", choices=["greedy", "beam", "gpt1", "gpt16"], default="greedy")
  p.add_argument("--steps", type=int, default=24)
  p.add_argument("--top", type=int, default=10)
  p.add_argument("--matmul_dtype", default=None, help="e.g. bfloat16 (TransformerConfig)")
  args = p.parse_args()
  with_hlo_dump("decode_hlo_")
  r = profile(args.case, args.steps, args.top, args.matmul_dtype)
  s = r["steps"]
  ms = lambda t: f"{1e3 * t / s:.2f}"
  print(f"{r['case']}: {s} steps; whole call {ms(r['wall'])} ms/step untraced; traced loop "
        f"{ms(r['loop'])} ms/step = ops {ms(r['ops'])} (matmuls {ms(r['matmul'])}) + gaps; "
        f"loop / matmuls = {r['loop'] / r['matmul']:.2f}x")
  print("| op (all layers) | kind | ms/step | share of loop | thunks/step |")
  print("| --- | --- | --- | --- | --- |")
  for row in r["rows"]:
    print(f"| `{row['op']}` | {row['kind']} | {ms(row['seconds'])} | "
          f"{100 * row['share']:.1f}% | {row['calls'] / s:.0f} |")

if __name__ == "__main__":
  main()
