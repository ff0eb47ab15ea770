"""The per-chip report of compiled steps: HBM against capacity, state bytes, model FLOPs,
the roofline lower bound of the step time, and the collectives per step.

FLOPs come from the task's own accounting (`flops_per_example`: 3x the forward pass).
The compiler's own estimate (`compiled.cost_analysis()`, which counts a scanned layer
stack's body once unless corrected) is aot/cost.py's, printed beside it.
"""
from __future__ import annotations

import math
import re

import jax
import numpy as np

from bert_jax.runtime import parallel
from bert_jax.aot import hlo
from bert_jax.hardware.chips import GiB

_TERMS = ("arguments", "temporaries", "outputs", "program")


class DoesNotFitError(ValueError):
  """A step needs more HBM per chip than the chip has."""


def tree_bytes(tree, name: str) -> dict:
  """{name_per_chip, name_total} bytes of a tree of ShapeDtypeStructs under their
  shardings (+ num_params for name "params")."""
  leaves = jax.tree_util.tree_leaves(tree)
  out = {f"{name}_per_chip": int(sum(math.prod(x.sharding.shard_shape(x.shape))
                                     * np.dtype(x.dtype).itemsize for x in leaves)),
         f"{name}_total": int(sum(x.size * np.dtype(x.dtype).itemsize for x in leaves))}
  if name == "params":
    out["num_params"] = int(sum(x.size for x in leaves))
  return out


def state_bytes(abstract_state) -> dict:
  """Per-chip and global bytes of params and optimizer state under their shardings."""
  return {**tree_bytes(abstract_state.params, "params"),
          **tree_bytes(abstract_state.opt_state, "opt_state")}


def memory(compiled) -> dict:
  """Per-chip HBM of a compiled step; donated arguments are counted once (aliases)."""
  m = compiled.memory_analysis()
  out = {"arguments": int(m.argument_size_in_bytes), "temporaries": int(m.temp_size_in_bytes),
         "outputs": int(m.output_size_in_bytes), "aliased": int(m.alias_size_in_bytes),
         "program": int(m.generated_code_size_in_bytes)}
  out["total"] = (out["arguments"] + out["temporaries"] + out["outputs"] - out["aliased"]
                  + out["program"])
  # Host memory the step holds (remat *_offloaded policies move saved activations there);
  # not part of the HBM total.
  out["host_temporaries"] = int(getattr(m, "host_temp_size_in_bytes", 0) or 0)
  return out


def _oom_terms(message: str) -> dict:
  """Sizes the TPU compiler names in its out-of-memory message, e.g. '... HLO temporaries
  (50.25G) exceeds available HBM (15.75G)', as {term: bytes}."""
  units = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": GiB, "T": 2 ** 40}
  terms = {}
  for name, value, unit in re.findall(
      r"(temporaries|arguments|outputs|program|available HBM)[^()\d]*\(([\d.]+)([KMGT]?)i?B?\)",
      message):
    terms[name] = float(value) * units[unit]
  return terms


def no_fit_message(step_name: str, capacity: int, mem: dict | None, oom: str) -> str:
  """One line: which step, how much it needs against the chip, and the dominant term."""
  if mem is not None:
    terms = {k: mem[k] - (mem["aliased"] if k == "outputs" else 0) for k in _TERMS}
    need = mem["total"]
  else:
    terms = {k: v for k, v in _oom_terms(oom).items() if k in _TERMS}
    need = sum(terms.values())
  if not terms:
    return f"{step_name} step does not fit in HBM ({capacity / GiB:.1f} GiB per chip): {oom.splitlines()[0]}"
  dominant = max(terms, key=terms.get)
  return (f"{step_name} step does not fit: needs >= {need / GiB:.2f} GiB per chip of "
          f"{capacity / GiB:.1f} GiB; dominant term: {dominant} {terms[dominant] / GiB:.2f} GiB"
          + (" (activations: lower train.batch_size, raise grad_accum_steps or use a "
             "stronger model.remat_policy)" if dominant == "temporaries" else
             " (state: shard it over more chips with mesh_shape's fsdp axis)"
             if dominant == "arguments" else ""))


def roofline(flops_per_chip: float, hbm_bytes: float, chip) -> dict:
  """Lower bound of the step time: the larger of compute at peak and one pass over the
  step's arguments and outputs at full HBM bandwidth (communication not included)."""
  compute = flops_per_chip / chip.peak_bf16_flops
  hbm = hbm_bytes / chip.hbm_bytes_per_sec
  return {"compute_seconds": compute, "hbm_seconds": hbm, "step_seconds": max(compute, hbm),
          "bound": "compute" if compute >= hbm else "memory"}


def step_report(step, task, batch_size: int, chip, num_chips: int) -> dict:
  """The report of one CompiledStep (bert_jax/aot/compile.py)."""
  shapes = task.phase_shapes(step.phase)
  flops = batch_size * task.flops_per_example(shapes["seq_len"], shapes["num_predictions"])
  if step.name == "eval":
    flops /= 3.0   # flops_per_example counts training (3x forward); eval runs the forward
  r = {"step": step.name, "phase": step.phase, "seq_len": shapes["seq_len"],
       "global_batch": batch_size, "compile_seconds": round(step.seconds, 2),
       "model_flops_per_step": flops, "model_flops_per_chip": flops / num_chips}
  return add_compiled(r, step, chip, flops / num_chips)


def add_compiled(r: dict, step, chip, flops_per_chip: float, hbm_bytes: float | None = None):
  """r with what the compile tells: fits (or the no-fit message), HBM, the roofline and
  the collectives. hbm_bytes: the bytes a step must move at least (default: every
  argument read and every output written once)."""
  if step.compiled is None:
    r.update(fits=False, error=no_fit_message(step.name, chip.hbm_bytes, None, step.error))
    return r
  mem = memory(step.compiled)
  r["hbm"] = mem
  r["fits"] = mem["total"] <= chip.hbm_bytes
  if not r["fits"]:
    r["error"] = no_fit_message(step.name, chip.hbm_bytes, mem, "")
  moved = mem["arguments"] + mem["outputs"] if hbm_bytes is None else hbm_bytes
  r["roofline"] = roofline(flops_per_chip, moved, chip)
  if step.hlo_text is not None:
    r["collectives"] = hlo.collectives(step.hlo_text)
  else:
    r["collectives"], r["collectives_error"] = None, step.hlo_error
  return r


def _gib(x: float) -> str:
  return f"{x / GiB:.2f} GiB" if x >= GiB / 10 else f"{x / 2 ** 20:.1f} MiB"


def row_shards(mesh, batch_size: int) -> dict:
  """How the hosts of the slice would load a batch (parallel.row_shards, seen from host 0:
  every host's view has the same counts)."""
  shards = parallel.row_shards(mesh, process_index=0)
  return {"hosts": shards.processes, "row_shards": shards.count,
          "hosts_per_block": shards.hosts_per_block,
          "blocks_per_host": shards.blocks_per_shard, "rows_per_host": batch_size // shards.count}


def format_report(report: dict) -> str:
  """Human-readable lines of a full report (bert_jax/aot/__main__.py builds it)."""
  chip = report["chip"]
  lines = [f"{report['config']} on {report['topology']} ({report['num_chips']} x {chip['name']}, "
           f"{_gib(chip['hbm_bytes'])} HBM, {chip['peak_bf16_flops'] / 1e12:.0f} TFLOP/s bf16, "
           f"{chip['hbm_bytes_per_sec'] / 1e9:.0f} GB/s) | mesh {report['mesh']}",
           f"params {report['state']['num_params'] / 1e6:.1f}M: "
           f"{_gib(report['state']['params_per_chip'])} per chip; optimizer state "
           f"{_gib(report['state']['opt_state_per_chip'])} per chip"]
  if report.get("row_shards"):
    rs = report["row_shards"]
    lines.append(f"data: {rs['hosts']} hosts read {rs['row_shards']} distinct row shards of "
                 f"{rs['rows_per_host']} rows; each batch block is held (and loaded) by "
                 f"{rs['hosts_per_block']} host{'s' * (rs['hosts_per_block'] > 1)}, each host "
                 f"holds {rs['blocks_per_host']} block{'s' * (rs['blocks_per_host'] > 1)}")
  for r in report["steps"]:
    head = f"{r['step']} step, " + (r.get("what") or f"seq {r['seq_len']}, global batch "
                                    f"{r['global_batch']}") + (
        f", remat {r['remat_policy']}" if r.get("remat_policy") else "") + ": "
    if "hbm" not in r:
      lines.append(head + "DOES NOT FIT: " + r["error"])
      continue
    m = r["hbm"]
    lines.append(head + f"compiled in {r['compile_seconds']:.1f} s")
    lines.append(f"  HBM per chip: arguments {_gib(m['arguments'])}, temporaries "
                 f"{_gib(m['temporaries'])}, outputs {_gib(m['outputs'])} "
                 f"({_gib(m['aliased'])} aliased to arguments), program {_gib(m['program'])} "
                 f"-> total {_gib(m['total'])} of {_gib(chip['hbm_bytes'])} "
                 f"({100 * m['total'] / chip['hbm_bytes']:.0f}%)"
                 + (f"; host memory {_gib(m['host_temporaries'])} (offloaded activations)"
                    if m.get("host_temporaries") else "")
                 + ("" if r["fits"] else "  DOES NOT FIT: " + r["error"]))
    rf = r["roofline"]
    lines.append(f"  model FLOPs {r['model_flops_per_step']:.3e} per step "
                 f"({r['model_flops_per_chip']:.3e} per chip); roofline >= "
                 f"{rf['step_seconds'] * 1e3:.2f} ms ({rf['bound']}-bound: compute "
                 f"{rf['compute_seconds'] * 1e3:.2f} ms, HBM {rf['hbm_seconds'] * 1e3:.2f} ms)")
    if r.get("cost"):
      c = r["cost"]
      lines.append(f"  TPU compiler's estimate: {c['optimal_seconds'] * 1e3:.2f} ms per step "
                   f"({c['flops_per_chip']:.3e} flops, {c['bytes_per_chip'] / 1e9:.2f} GB per "
                   f"chip), est. MFU {100 * c['est_mfu']:.1f}%, "
                   f"{c['tokens_per_s_per_chip']:,.0f} tokens/s per chip ({c['method']})")
      if c.get("bytes_by_category"):
        t = c["bytes_by_category"]
        top = sorted(t["by_category"].items(), key=lambda kv: -kv[1])[:4]
        lines.append("  its bytes by category: " + ", ".join(
            f"{k} {100 * v / max(t['total_bytes'], 1):.0f}%" for k, v in top)
            + f"; {t['hbm_bytes'] / 1e9:.2f} GB of {t['total_bytes'] / 1e9:.2f} GB in HBM")
    elif r.get("cost_note"):
      lines.append(f"  TPU compiler's estimate: {r['cost_note']}")
    if r["collectives"] is None:
      lines.append("  collectives per step: unknown (XLA could not print the compiled HLO: "
                   f"{r['collectives_error']})")
      continue
    coll = ", ".join(f"{k} {v['count']} x / {v['bytes'] / 2 ** 20:.1f} MiB"
                     for k, v in r["collectives"].items() if v["count"])
    lines.append(f"  collectives per step: {coll or 'none'}"
                 + (f" ({r['collectives_note']})" if r.get("collectives_note") else ""))
  return "\n".join(lines)
