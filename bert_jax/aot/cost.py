"""The TPU compiler's own estimate of a compiled step: flops, bytes and seconds per chip.

`compiled.cost_analysis()` reports what the compiler's cost model makes of the optimized
per-device program: "flops", "bytes accessed" and "optimal_seconds", its estimate of
the step's time on the chip. It is a model, not a measurement (docs/aot.md says what it
leaves out). Two things make the raw figures wrong, and this module corrects both:

* A while loop's body is counted once, whatever its trip count. A scanned layer stack
  (the TPU default) is one loop of num_layers iterations, so the raw figures hold one
  layer of the forward and one of the backward. The cost is
  therefore that of an unrolled twin: the same config, state, batch and shardings with
  scan_layers off, compiled for the cost only. (Scaling the loop body instead, from twins
  with 1 and 2 layers per iteration, gets the flops within a few percent but not the
  bytes: the cost model counts each dynamic-update-slice into the stacked [layers, ...]
  buffers as a pass over the whole buffer, which a layer's difference then multiplies;
  docs/aot.md has the figures.) With gradient accumulation the microbatch loop is counted
  once too, and no estimate is given.
* libtpu reports each sliced-prefetch custom call as -1 flop, -1 byte and -1 s,
  which turns optimal_seconds negative. The cost compiles pass
  xla_tpu_sliced_prefetch_max_slices=0, no sliced prefetches, so each prefetch is one
  whole counted copy (1, one slice, gives the same figures on v5e but aborts libtpu on
  v5p and v6e: "Support sliced prefetches for split shapes"); the step compiled for the
  memory report keeps the compiler's default.

model_flops is the useful work of a step, the same formula for every implementation of a
model (PaLM, Chowdhery et al. 2022, appendix B): 6 N T + 12 L S d T per training step
(N parameters, T tokens, L layers, S sequence length, d width); a third of it for an
eval step (forward only). Models it does not describe (an encoder-decoder, the GRU) use
their task's own accounting (`flops_per_example`), and the report says which.
est_mfu = model_flops / chips / optimal_seconds / peak bf16.
"""
from __future__ import annotations

import copy

# Keeps each prefetch one counted copy (see the module docstring).
COST_COMPILER_OPTIONS = {"xla_tpu_sliced_prefetch_max_slices": "0"}


def compiler_cost(compiled) -> dict:
  """{flops, bytes, optimal_seconds, transcendentals} of one compiled executable.

  Raises ValueError when the compiler's figure cannot be a time (a negative
  optimal_seconds: an uncounted custom call), rather than report it."""
  ca = compiled.cost_analysis()
  if isinstance(ca, (list, tuple)):  # older jax: one dict per program
    ca = ca[0] if ca else {}
  out = {"flops": float(ca.get("flops", 0.0)), "bytes": float(ca.get("bytes accessed", 0.0)),
         "optimal_seconds": float(ca.get("optimal_seconds", -1.0)),
         "transcendentals": float(ca.get("transcendentals", 0.0))}
  if out["optimal_seconds"] <= 0:
    raise ValueError(f"the compiler's optimal_seconds is {out['optimal_seconds']:.3g}: some "
                     "custom call went uncounted (compile with COST_COMPILER_OPTIONS)")
  return out


def model_flops(num_params: int, num_layers: int, seq_len: int, hidden: int, tokens: int,
                train: bool = True) -> float:
  """6 N T + 12 L S d T for a training step, a third of it for a forward (eval) step: an
  encoder's or a decoder's, one stack over one sequence (check.py gives other models
  their task's own flops accounting instead)."""
  flops = 6.0 * num_params * tokens + 12.0 * num_layers * seq_len * hidden * tokens
  return flops if train else flops / 3.0


def estimate(raw: dict, flops: float, tokens: int, num_chips: int, peak_flops: float) -> dict:
  """The report's "cost" object: the compiler's per-chip figures and what follows (and
  raw["traffic"], aot/traffic.py's split of the bytes, as "bytes_by_category")."""
  seconds = raw["optimal_seconds"]
  return {"flops_per_chip": raw["flops"], "bytes_per_chip": raw["bytes"],
          "optimal_seconds": seconds, "model_flops": flops,
          "est_mfu": flops / num_chips / seconds / peak_flops,
          "tokens_per_s_per_chip": tokens / seconds / num_chips,
          **({"bytes_by_category": raw["traffic"]} if "traffic" in raw else {})}


def step_cost(config, scanned: bool, compile_twin) -> tuple[dict | None, str]:
  """(the compiler's cost of the step with every layer counted, or None; how).

  scanned: whether the task's model scans its layers (task.model_config.scan_layers: a
  fine-tuning run takes its encoder from init_from, not config.model). compile_twin(config)
  compiles the step for `config` or a variant of it (platform resolved) with
  COST_COMPILER_OPTIONS and returns its compiler_cost."""
  if int(config.train.get("grad_accum_steps") or 1) > 1:
    return None, ("unknown with grad_accum_steps > 1: the compiler counts the microbatch "
                  "loop once; compile at the microbatch's batch size instead")
  if not scanned:
    return compile_twin(config), "unrolled layers"
  twin = copy.deepcopy(config)
  with twin.unlocked():
    twin.model.scan_layers = False
  return compile_twin(twin), "scanned layers: an unrolled twin compiled for the cost"
