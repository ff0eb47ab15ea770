"""BERT-base with the paper's recipe (Devlin et al. 2019): 1M steps of batch 256,
seq 128 for 90% of the steps then 512; Adam 1e-4 (β 0.9/0.999, ε 1e-6), 10k warmup,
linear decay, weight decay 0.01; bf16 compute, params and optimizer state in float32.

Per-platform default: `model.scan_layers` is None, i.e. the 12 layers unrolled on every
platform (train/defaults.default_for: on TPU a scanned stack without remat holds twice
the activations, and on CPU scan costs ~10% of every step). A resumed
run keeps the layout of its checkpoints. --config.model.scan_layers=true|false fixes it.

Run (one host; TPU pods: launch/tpu_pod.sh; SLURM: launch/slurm.sbatch):
  python -m bert_jax.main --config configs/bert_base.py --workdir /path/to/bert_base
MLM only with packed rows (RoBERTa-style): --config configs/bert_base.py:mlm_only
A real corpus: --config.data.corpus=tfds --config.data.tfds_name=wikipedia/20230601.en
(needs network and `pip install -r requirements-tf.txt`); the default is the embedded one.
Sweep: python launch/sweep.py --config configs/bert_base.py --workdir_root DIR --dry_run
"""
from bert_jax.train.defaults import bert_pretraining_config, with_phase_remat

# Attention dropout: the paper's 0.1, kept (a faithful recipe). On TPU it runs inside our
# fused kernel (kernels/flash_dropout.py); on GPU jax 0.10.2's public cuDNN function has
# none, so attention takes the written-out path there, and the start-up line says so;
# for speed: --config.model.attention_dropout_rate=0 (as MosaicBERT and Cramming train).

# Remat per phase, from the AOT figures (v5e:2x2, data parallel; docs/aot.md, "Choosing the
# remat policy"): at S128 the unrolled stack fits without remat at 4x the recipe's batch,
# and the TPU compiler's estimate of the step is then the fastest of the policies; S512
# keeps dots_no_batch (bench/RESULTS.md@0762931 "AOT"), not `full`'s recomputation of
# every matmul.
S128_REMAT, S512_REMAT = "none", "dots_no_batch"


def get_config(arg=None):
  if arg not in (None, "", "mlm_only"):
    raise ValueError(f"unknown arg {arg!r}; expected mlm_only (or none)")
  c = bert_pretraining_config("bert/base", arg)
  with_phase_remat(c, S128_REMAT, S512_REMAT)
  return c


def get_sweep(hyper):
  """Learning rate x warmup, expanded by launch/sweep.py into runs with their own workdirs."""
  return hyper.product([hyper.sweep("config.train.learning_rate", [5e-5, 1e-4, 2e-4]),
                        hyper.sweep("config.train.warmup_steps", [5000, 10000])])
