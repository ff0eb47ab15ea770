"""Per-chip HBM and compile time on a TPU topology: our BERT-large pretraining step vs
transformers' FlaxBertForPreTraining, both compiled ahead of time (libtpu, no TPU).

  .venv-bench/bin/python bench/aot/vs_flaxbert.py --topology v5e:4x4 --seq 512 \
      --batches 64,128,256,512 --systems ours,theirs,theirs_remat

(.venv-bench: bench/requirements-bench.txt, which includes libtpu.) For every system and
global batch it compiles the train step for the topology and prints one JSON line:
fits, per-chip HBM (arguments, temporaries, outputs, total incl. program), compile seconds.
The largest batch that fits per system is the last line.

* ours: configs/bert_large.py (bf16 compute, scan over layers, remat `dots_no_batch`
  (`ours_remat_full`: remat `full`, every layer's activations recomputed), attention
  dropout 0.1, on TPU inside kernels/flash_dropout.py since that kernel (the written-out
  attention before it; `ours_splash*`: attention dropout 0, the Pallas splash kernel),
  mesh (-1, 4, 1): weights and Adam moments sharded 4-way over fsdp, data over the rest),
  one phase at --seq with BERT's prediction count (20 at 128, 80 at 512), compiled by
  bert_jax.aot exactly as the loop jits it. `--our_mesh -1,1,1` gives plain data parallel.
* theirs: FlaxBertForPreTraining (BERT-large, dtype bfloat16, params float32) with the
  run_mlm_flax-style step (MLM cross-entropy over every position's logits with labels
  -100 off the masked tokens, + NSP), AdamW through optax, data parallel: params and
  optimizer state replicated, the batch split over all chips (run_mlm_flax's pmap, as
  one jit). `theirs_remat` is the same with gradient_checkpointing=True.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/

from bert_jax import hardware  # noqa: E402

hardware.configure()  # an entry point: the platform settled as the CLIs settle it
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from bert_jax.hardware import chips  # noqa: E402
from bert_jax.aot import report as report_lib  # noqa: E402
import results_io  # noqa: E402

PREDICTIONS = {128: 20, 512: 80}
# BertConfig sizes (the rest is BertConfig's default: BERT's dropout 0.1 everywhere).
SIZES = {"base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072),
         "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                       intermediate_size=4096)}
# Our systems: (remat policy, attention dropout). "" = the config's: remat dots_no_batch,
# attention dropout 0.1, which "auto" runs in kernels/flash_dropout.py on TPU (before
# that kernel: the written-out softmax(QK^T)V); `_splash` sets attention dropout 0, so
# "auto" picks the Pallas splash kernel (layers/attention.py).
OURS = {"ours": ("", None), "ours_remat_full": ("full", None),
        "ours_splash": ("", 0.0), "ours_splash_remat_full": ("full", 0.0),
        "ours_splash_kv_proj": ("kv_proj", 0.0)}


def _load_config(seq: int, batch: int, mesh, remat: str = "", attention_dropout=None):
  import importlib.util  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  spec = importlib.util.spec_from_file_location("bl", os.path.join(root, "configs", "bert_large.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config()
  c.train.phases = (dict(fraction=1.0, max_seq_length=seq,
                         max_predictions_per_seq=PREDICTIONS[seq]),)
  c.train.batch_size = batch
  if mesh:
    c.mesh_shape = tuple(mesh)
  if remat:
    c.model.remat_policy = remat
  if attention_dropout is not None:
    c.model.attention_dropout_rate = attention_dropout
  return c


def ours(topology: str, seq: int, batch: int, mesh, remat: str = "",
         attention_dropout=None) -> dict:
  from bert_jax.aot.check import check  # pylint: disable=g-import-not-at-top
  try:
    r = check(_load_config(seq, batch, mesh, remat, attention_dropout), topology,
              steps=("train",))
  except report_lib.DoesNotFitError as e:
    r = e.report
  step = r["steps"][0]
  return {"fits": step["fits"], "hbm": step.get("hbm"), "error": step.get("error", ""),
          "compile_seconds": step["compile_seconds"]}


def theirs_lowered(topology: str, seq: int, batch: int, remat: bool, size: str = "large"):
  """The jitted run_mlm_flax-style train step of FlaxBertForPreTraining (BERT-`size`),
  lowered for the topology's chips: data parallel, params replicated."""
  from flax.training import common_utils, train_state  # pylint: disable=g-import-not-at-top
  from transformers import BertConfig, FlaxBertForPreTraining  # pylint: disable=g-import-not-at-top
  _, devices = chips.topology_devices(topology)
  mesh = jax.sharding.Mesh(np.asarray(devices), ("data",))
  cfg = BertConfig(vocab_size=30522, max_position_embeddings=512, **SIZES[size])
  model = FlaxBertForPreTraining(cfg, input_shape=(1, seq), dtype=jnp.bfloat16, _do_init=False,
                                 gradient_checkpointing=remat)
  tx = optax.adamw(optax.linear_schedule(1e-4, 0.0, 1_000_000), b1=0.9, b2=0.999, eps=1e-6,
                   weight_decay=0.01)

  def create(key):
    params = model.init_weights(key, (1, seq))
    return train_state.TrainState.create(apply_fn=model.__call__, params=params, tx=tx)

  rep = NamedSharding(mesh, P())
  abstract = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep),
                                    jax.eval_shape(create, jax.random.PRNGKey(0)))
  rows = NamedSharding(mesh, P("data"))
  ids = jax.ShapeDtypeStruct((batch, seq), jnp.int32, sharding=rows)
  batch_sds = dict(input_ids=ids, attention_mask=ids, token_type_ids=ids, labels=ids,
                   next_sentence_label=jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=rows))
  key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=rep)

  def train_step(state, b, dropout_rng):
    dropout_rng, new_rng = jax.random.split(dropout_rng)

    def loss_fn(params):
      out = state.apply_fn(b["input_ids"], b["attention_mask"], b["token_type_ids"],
                           params=params, dropout_rng=dropout_rng, train=True)
      logits = out.prediction_logits                     # [batch, seq, vocab]
      mask = jnp.where(b["labels"] != -100, 1.0, 0.0)
      mlm = optax.softmax_cross_entropy(logits, common_utils.onehot(b["labels"], 30522)) * mask
      nsp = optax.softmax_cross_entropy_with_integer_labels(
          out.seq_relationship_logits, b["next_sentence_label"]).mean()
      return mlm.sum() / mask.sum() + nsp

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss, new_rng

  return jax.jit(train_step, donate_argnums=(0,)).lower(abstract, batch_sds, key)


def theirs(topology: str, seq: int, batch: int, remat: bool) -> dict:
  t0 = time.perf_counter()
  try:
    compiled = theirs_lowered(topology, seq, batch, remat).compile()
  except Exception as e:  # pylint: disable=broad-except
    if "RESOURCE_EXHAUSTED" not in str(e) and "Ran out of memory" not in str(e):
      raise
    return {"fits": False, "hbm": None, "error": str(e).splitlines()[0],
            "compile_seconds": round(time.perf_counter() - t0, 1)}
  mem = report_lib.memory(compiled)
  chip, _ = chips.parse_topology(topology)
  return {"fits": mem["total"] <= chip.hbm_bytes, "hbm": mem, "error": "",
          "compile_seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--topology", default="v5e:4x4")
  p.add_argument("--seq", type=int, choices=sorted(PREDICTIONS), default=512)
  p.add_argument("--batches", default="64,128,256,512")
  p.add_argument("--systems", default="ours,theirs,theirs_remat")
  p.add_argument("--our_mesh", default="", help="e.g. -1,1,1 (default: the config's)")
  p.add_argument("--result", default="", help="CASE: also write bench/results/aot-CASE.json")
  args = p.parse_args(argv)
  mesh = [int(x) for x in args.our_mesh.split(",")] if args.our_mesh else None
  systems = args.systems.split(",")
  unknown = sorted(set(systems) - set(OURS) - {"theirs", "theirs_remat"})
  if unknown:
    p.error(f"unknown --systems {unknown}: expected some of {sorted(OURS)}, theirs, theirs_remat")
  largest, rows = {}, {}
  load_before = results_io.load()
  for system in systems:
    for batch in [int(b) for b in args.batches.split(",")]:
      if system.startswith("ours"):
        r = ours(args.topology, args.seq, batch, mesh, *OURS[system])
      else:
        r = theirs(args.topology, args.seq, batch, remat=system == "theirs_remat")
      total = r["hbm"]["total"] / 2 ** 30 if r["hbm"] else None
      print(json.dumps({"system": system, "seq": args.seq, "global_batch": batch,
                        "topology": args.topology, "fits": r["fits"],
                        "hbm_total_gib": total, "compile_seconds": r["compile_seconds"],
                        "error": r["error"][:200]}), flush=True)
      rows[system, batch] = (r["fits"], total, r["compile_seconds"])
      if r["fits"]:
        largest[system] = batch
      else:
        break  # larger batches will not fit either
  print(json.dumps({"largest_fitting_global_batch": largest}), flush=True)
  if args.result:
    print("wrote", results_io.write(aot_result(args, systems, largest, rows, load_before)))
  return 0


def aot_result(args, systems, largest: dict, rows: dict, load_before: float) -> dict:
  """bench/results/aot-<case>.json: each system's largest batch, its HBM and compile time;
  the goal: vs theirs (>= 2x the rows with remat, >= 3x faster compiles) when theirs ran,
  else splash's (4096 rows with remat full, 2048 without)."""
  figures = []
  for system in systems:
    if system not in largest:
      figures.append(results_io.figure(f"{system}: largest batch", 0, "rows",
                                       "the smallest of --batches does not fit"))
      continue
    _, gib, seconds = rows[system, largest[system]]
    figures += [results_io.figure(f"{system}: largest batch", largest[system], "rows"),
                results_io.figure(f"{system}: HBM per chip at it", round(gib, 2), "GiB"),
                results_io.figure(f"{system}: compile at it", seconds, "s")]
  ours = max((largest.get(s, 0) for s in systems if s.startswith("ours")), default=0)
  goal, anchor = None, "the chip's HBM (16 GiB per v5e chip)"
  title = f"AOT: BERT-large S{args.seq} on {args.topology}"
  if "theirs_remat" in systems and largest.get("theirs_remat") and ours:
    batch = min(ours, largest["theirs_remat"])
    our_s = min(rows[s, batch][2] for s in systems if s.startswith("ours") and (s, batch) in rows)
    ratio = rows["theirs_remat", batch][2] / our_s
    goal = results_io.goal("vs FlaxBertForPreTraining", ">= 2x the rows with remat; "
                           ">= 3x faster compiles",
                           ours >= 2 * largest["theirs_remat"] and ratio >= 3)
    anchor = "transformers' FlaxBertForPreTraining with gradient checkpointing"
    title = f"AOT: BERT-large S{args.seq} vs FlaxBertForPreTraining on {args.topology}"
  elif "ours_splash_remat_full" in systems and "ours_splash_kv_proj" in systems:
    goal = results_io.goal(f"BERT-large S{args.seq} with splash", "4096 rows with remat "
                           "full; >= 2048 without remat full (kv_proj)",
                           largest.get("ours_splash_remat_full", 0) >= 4096
                           and largest.get("ours_splash_kv_proj", 0) >= 2048)
  headline = "; ".join(f"{s} {largest.get(s, 0)} rows" for s in systems)
  return results_io.result(
      "aot", title, figures, anchor,
      headline, case=args.result, goal_=goal, load_before=load_before,
      notes="Compiled here by libtpu without a TPU; compile seconds are this CPU's.") | {
          "hardware": f"AOT, {args.topology} (libtpu on a CPU host)"}


if __name__ == "__main__":
  sys.exit(main())
