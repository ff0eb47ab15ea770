"""Default `train` section and top-level fields shared by the config files in configs/."""
from __future__ import annotations

import ml_collections


def train_config(**overrides) -> ml_collections.ConfigDict:
  """BERT's pretraining recipe (Devlin et al. 2019, Appendix A.2) as defaults."""
  c = ml_collections.ConfigDict()
  c.batch_size = 256                 # global, over all processes and devices
  c.num_steps = 1_000_000
  c.grad_accum_steps = 1             # microbatches per step (exactly the big batch)
  c.optimizer = "adamw"              # adamw | lamb | sgd
  c.learning_rate = 1e-4
  c.b1 = 0.9
  c.b2 = 0.999
  c.eps = 1e-6
  c.weight_decay = 0.01              # not on LayerNorm params and biases
  c.momentum = 0.0                   # sgd only
  c.schedule = "linear"              # linear | inverse_sqrt | constant
  c.warmup_steps = 10_000
  c.grad_clip_norm = 1.0
  # Sequence-length phases, e.g. BERT's 90% of steps at 128 tokens then 512 (see
  # bert_pretraining_config). Empty: one phase at config.data's max_seq_length.
  c.phases = ()
  c.log_every = 100
  c.eval_every = 10_000
  c.eval_steps = 100                 # batches per evaluation (0: the whole split)
  c.checkpoint_every = 10_000
  c.keep_checkpoints = 3
  c.async_checkpoints = True
  c.best_metric = ""                 # e.g. "mlm_accuracy": also keep the best checkpoint
  c.best_mode = "max"
  c.skip_nonfinite = False           # False: stop with an error naming the step
  c.peak_flops_per_device = 0.0      # 0: measure a matmul once (the MFU denominator)
  c.update(overrides)
  return c


def model_config(variant: str, **overrides) -> ml_collections.ConfigDict:
  """`config.model`: every TransformerConfig field of the variant, so each one can be
  overridden from the command line (`--config.model.dropout_rate=0`) in a locked config."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from bert_jax.models.variants import get_model_config  # pylint: disable=g-import-not-at-top
  fields = dataclasses.asdict(get_model_config(variant, **overrides))
  for name in ("head_dim", "mlp_dim"):  # Optional ints: resolve, so the type is int
    fields[name] = fields[name] or 0
  c = ml_collections.ConfigDict(dict(variant=variant, **fields))
  return c


def base_config(task: str) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.task = task
  c.seed = 0
  c.mesh_shape = (-1, 1, 1)          # (data, fsdp, tensor); -1 takes the remaining devices
  c.init_from = ""                   # our checkpoint dir or an HF BERT dir (params only)
  return c


def bert_pretraining_config(variant: str, arg=None) -> ml_collections.ConfigDict:
  """The paper's pretraining setup for a BERT variant; arg "mlm_only" packs rows, no NSP."""
  from bert_jax.data.config import get_data_config  # pylint: disable=g-import-not-at-top
  c = base_config("bert_pretraining")
  c.model = model_config(variant, dtype="bfloat16", scan_layers=True,
                         remat_policy="dots_no_batch")
  c.data = get_data_config()
  c.data.mode = "mlm_packed" if arg == "mlm_only" else "nsp"
  c.train = train_config(phases=(
      dict(fraction=0.9, max_seq_length=128, max_predictions_per_seq=20),
      dict(fraction=0.1, max_seq_length=512, max_predictions_per_seq=80)))
  return c
