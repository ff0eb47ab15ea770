"""BERT-large (24 layers x 1024, 16 heads) with the paper's recipe (Devlin et al. 2019).

Run:
  python -m bert_jax.main --config configs/bert_large.py --workdir /path/to/bert_large
The mesh shards weights and optimizer state over 'fsdp' (4-way) and data over the rest.
Layers are scanned on every platform (`model.scan_layers` None = per platform: only
stacks of up to 12 layers unroll; train/defaults.default_for).
Arg `s512`: one phase at 512 tokens (80 predictions), the phase that decides memory.
Before booking a pod, compile it for the pod's topology (no TPU needed):
  python -m bert_jax.aot --config configs/bert_large.py --topology v5e:4x4
  python launch/sweep.py --config configs/bert_large.py:s512 --aot v5e-256
"""
from bert_jax.train.defaults import bert_pretraining_config, with_phase_remat

# Attention dropout: the paper's 0.1, kept (a faithful recipe). On TPU "auto" runs it
# inside our fused kernel (kernels/flash_dropout.py), so S512 keeps splash's memory:
# docs/aot.md has the rows that fit. On GPU it is the written-out path (cuDNN's public
# function has no dropout), said by the start-up line; --config.model.attention_dropout_rate=0
# for splash / cuDNN without it, as MosaicBERT and Cramming train.

# Remat per phase, from the AOT tables (bench/RESULTS.md@0762931 "AOT", v5e:4x4, mesh (4, 4, 1)):
# S128: dots_no_batch (saves the projections' outputs, recomputes attention and the
#   elementwise ops) fits 2048 rows in 9.46 GiB per chip of 16; `full` buys no batch the
#   phase uses and recomputes every matmul.
# S512: none. The fused attention kernels never build the [batch, heads, 512, 512] scores,
#   so the recipe's 256 rows fit without recomputing anything, and the TPU compiler's
#   estimate of the step is the fastest of the three policies (bench/results/
#   tpu_cost-large_s512_b256.json; docs/performance-notes.md, "Remat at S512"). Larger
#   batches need `full`: --config.model.remat_policy=full with arg s512 (4096 rows fit).
S128_REMAT, S512_REMAT = "dots_no_batch", "none"


def get_config(arg=None):
  if arg not in (None, "", "mlm_only", "s512"):
    raise ValueError(f"unknown arg {arg!r}; expected mlm_only or s512 (or none)")
  c = bert_pretraining_config("bert/large", "mlm_only" if arg == "mlm_only" else None)
  c.mesh_shape = (-1, 4, 1)
  if arg == "s512":
    # One phase; its remat is model.remat_policy, so sweeps (get_sweep) can vary it.
    c.train.phases = (dict(fraction=1.0, max_seq_length=512, max_predictions_per_seq=80),)
    c.model.remat_policy = S512_REMAT
  else:
    with_phase_remat(c, S128_REMAT, S512_REMAT)
  return c


def get_sweep(hyper):
  """Parallelism x remat x global batch for `launch/sweep.py --aot TOPOLOGY` (v5p-128,
  v5e-256): which strategies fit, and the largest batch each one fits.

  The tensor-parallel mesh needs no setting of its own: the vocabulary table is padded to
  a multiple of 128 x tensor by itself (30522 -> 30720 rows at tensor 4; config.model.
  vocab_multiple)."""
  return hyper.product([
      hyper.sweep("config.mesh_shape", [(-1, 1, 1), (-1, 8, 1), (1, -1, 1), (-1, 8, 4)]),
      hyper.sweep("config.model.remat_policy", ["none", "dots_no_batch", "full"]),
      hyper.sweep("config.train.batch_size", [256, 1024, 4096]),
  ])
