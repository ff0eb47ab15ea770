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

import ml_collections

from bert_jax.runtime import parallel
from bert_jax.hardware import chips
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
  step_lib.check_chunk_size(t.chunk_size, mesh)
  _, abstract, shardings = step_lib.abstract_state(mesh, vocab_size, config.model.embed_dim,
                                                   config.seed, config.model.init_scale)
  batch = step_lib.abstract_batch(t.chunks_per_step, t.chunk_size, t.negatives, mesh)
  step_fn = step_lib.make_train_step(mesh, shardings)
  step = compile_lib.compile_lowered("train", {}, lambda: step_fn.lower(abstract, batch))
  n = len(mesh.devices.flat)
  pairs = t.chunks_per_step * t.chunk_size
  d, k = config.model.embed_dim, t.negatives
  flops = pairs * flops_per_pair(d, k)
  r = {"step": "train", "phase": {}, "what": f"{t.chunks_per_step} chunks of {t.chunk_size} "
       f"pairs, {k} negatives, vocabulary {vocab_size}", "global_batch": pairs,
       "compile_seconds": round(step.seconds, 2), "model_flops_per_step": flops,
       "model_flops_per_chip": flops / n}
  # Every chip applies every pair's row updates to the rows it holds (word2vec/step.py).
  report_lib.add_compiled(r, step, chip, flops / n, hbm_bytes=pairs * bytes_per_pair(d, k))
  if r.get("collectives") is not None:
    # The chunk loop's trip count is known only at run time (empty chunks are skipped),
    # so hlo.collectives counts its body once.
    r["collectives_note"] = (f"the chunk loop's are counted once: up to "
                             f"{t.chunks_per_step} x per step")
  # The compiler's cost analysis counts that loop's body once too (aot/cost.py).
  r["cost_note"] = "unknown: the chunk loop's trip count is known only at run time"
  params = abstract["params"]
  report = {"config": config_name or config.task, "topology": topology, "num_chips": n,
            "chip": dataclasses.asdict(chip), "mesh": dict(mesh.shape), "remat_policy": None,
            "state": {**report_lib.tree_bytes(params, "params"),
                      "opt_state_per_chip": 0, "opt_state_total": 0},
            "steps": [r]}
  return report, [step.hlo_text] if step.hlo_text is not None else []
