"""The AOT check of word2vec's own step (bert_jax/word2vec/step.py) for a TPU topology.

word2vec trains outside the shared loop (sparse SGD on the sharded tables, no optimizer
state), so its state and batch come from word2vec/step.py's `abstract_state` and
`abstract_batch`, the same functions its trainer compiles against. The vocabulary is
built from the corpus at run time; here its size is given (`vocab_size`).

FLOPs and the roofline are this step's own: per pair, k + 1 dot products of d (logits),
the two gradient products (2 d (k + 1) and d (k + 1)) and the scatter-adds (d (k + 2));
the bytes are the table rows it gathers and scatter-adds (read, read + write), not the
tables (donated and updated in place, only the touched rows move).
"""
from __future__ import annotations

import dataclasses
import time

import jax
import ml_collections

from bert_jax import parallel
from bert_jax.aot import chips, hlo
from bert_jax.aot import compile as compile_lib
from bert_jax.aot import report as report_lib
from bert_jax.word2vec import step as step_lib

DEFAULT_VOCAB_SIZE = 1_000_000


def flops_per_pair(embed_dim: int, negatives: int) -> float:
  k1 = negatives + 1
  return embed_dim * (2 * k1 + 2 * k1 + k1 + (negatives + 2))


def bytes_per_pair(embed_dim: int, negatives: int, itemsize: int = 4) -> float:
  """Table rows a pair touches: gathered once, scatter-added (read + write) once."""
  return 3 * (negatives + 2) * embed_dim * itemsize


def check(config: ml_collections.ConfigDict, topology: str, vocab_size: int = 0,
          config_name: str = "") -> tuple[dict, list[str]]:
  """(report, HLO texts) of word2vec's train step compiled for `topology`."""
  vocab_size = vocab_size or DEFAULT_VOCAB_SIZE
  chip, devices = chips.topology_devices(topology)
  mesh = parallel.create_mesh(tuple(config.mesh_shape), devices=devices)
  t = config.train
  lanes = parallel.data_parallel_size(mesh)
  if t.chunk_size % lanes:
    raise ValueError(f"train.chunk_size={t.chunk_size} must divide by the {lanes} data "
                     f"shards of mesh {dict(mesh.shape)}.")
  _, abstract, shardings = step_lib.abstract_state(mesh, vocab_size, config.model.embed_dim,
                                                   config.seed)
  batch = step_lib.abstract_batch(t.chunks_per_step, t.chunk_size, t.negatives, mesh)
  step_fn = step_lib.make_train_step(mesh, jax.tree_util.tree_map(
      lambda x: x.sharding, abstract))
  t0 = time.perf_counter()
  try:
    compiled = step_fn.lower(abstract, batch).compile()
    step = compile_lib.CompiledStep("train", {}, compiled, time.perf_counter() - t0)
    step.hlo_text, step.hlo_error = hlo.compiled_text(compiled)
  except Exception as e:  # pylint: disable=broad-except
    if not compile_lib.is_out_of_memory(e):
      raise
    step = compile_lib.CompiledStep("train", {}, None, time.perf_counter() - t0, str(e))
  n = len(mesh.devices.flat)
  pairs = t.chunks_per_step * t.chunk_size
  d, k = config.model.embed_dim, t.negatives
  flops = pairs * flops_per_pair(d, k)
  r = {"step": "train", "phase": {}, "what": f"{t.chunks_per_step} chunks of {t.chunk_size} "
       f"pairs, {k} negatives, vocabulary {vocab_size}", "global_batch": pairs,
       "compile_seconds": round(step.seconds, 2), "model_flops_per_step": flops,
       "model_flops_per_chip": flops / n}
  if step.compiled is None:
    r.update(fits=False, error=report_lib.no_fit_message("train", chip.hbm_bytes, None,
                                                         step.error))
  else:
    mem = report_lib.memory(step.compiled)
    r.update(hbm=mem, fits=mem["total"] <= chip.hbm_bytes)
    if not r["fits"]:
      r["error"] = report_lib.no_fit_message("train", chip.hbm_bytes, mem, "")
    # Every chip applies every pair's row updates to the rows it holds (word2vec/step.py).
    r["roofline"] = report_lib.roofline(flops / n, pairs * bytes_per_pair(d, k), chip)
    if step.hlo_text is not None:
      r["collectives"] = hlo.collectives(step.hlo_text)
      # The chunk loop's trip count is known only at run time (empty chunks are skipped),
      # so hlo.collectives counts its body once.
      r["collectives_note"] = (f"the chunk loop's are counted once: up to "
                               f"{t.chunks_per_step} x per step")
    else:
      r["collectives"], r["collectives_error"] = None, step.hlo_error
  params = abstract["params"]
  report = {"config": config_name or config.task, "topology": topology, "num_chips": n,
            "chip": dataclasses.asdict(chip), "mesh": dict(mesh.shape), "remat_policy": None,
            "state": {**report_lib.tree_bytes(params, "params"),
                      "opt_state_per_chip": 0, "opt_state_total": 0},
            "steps": [r]}
  return report, [step.hlo_text] if step.hlo_text is not None else []
