"""ModernBERT (Warner et al. 2024): the 2024 encoder and its pretraining recipe.

arg: tiny (default) | base | large, or variant=<one of them>.
  tiny: the CPU demo's size (3 layers, 128 wide: one global, two local layers) on the
        embedded corpus, with bert_tiny.py:demo's data (packed rows, 4,096 WordPiece
        tokens, 128 positions) so their held-out fill-mask curves compare
        (bench/time_to_quality/modernbert_demo.py).
  base / large: answerdotai/ModernBERT-{base,large}'s sizes (models/variants.py) and the
        paper's recipe (Sec. 2.2 and Appendix A), with these defaults:
        - objective: MLM only on packed rows, 30% of the tokens masked (80/10/10 in
          data.mask_token_prob / data.random_token_prob), no NSP;
        - optimizer: StableAdamW (train/stable_adamw.py), b2 0.98, eps 1e-6, weight
          decay 1e-5 fully decoupled from the learning rate (optimi's decouple_lr, the
          paper's: lambda x lr_t / lr_peak a step; optax scales it by lr_t, so the
          config's weight_decay is 1e-5 / lr_peak);
        - schedule: warmup-stable-decay with the 1-sqrt decay (train.schedule "wsd");
        - batch-size warmup: the global batch ramps through fixed sizes (each stage
          compiles once) over the first tokens (train/phases.batch_warmup_phases);
        - 1,024 tokens with global theta 10,000, then context extension to 8,192
          with theta 160,000 (train.phases: rotary_base per phase), the same tokens a
          step;
        - vocabulary rows padded to a multiple of 64 (model.vocab_multiple).
        Where it differs from the paper: one schedule for the whole run, so the 8,192
        phase trains at the peak rate and takes the 1-sqrt decay (the paper extended at
        a lower constant rate, then decayed); the attention output's dropout is
        model.attention_dropout_rate's (transformers' too).
        The corpus: set --config.data.corpus=tfds / text (the embedded one is small). Data
        preparation trains a WordPiece vocabulary; a BPE tokenizer.json (the published
        checkpoints') is not read by it yet.
Run (offline, the tiny demo; data preparation included):
  python -m bert_jax.main --config configs/modernbert.py:tiny --workdir workdirs/modernbert
  python -m bert_jax.aot --config configs/modernbert.py:base --topology v5e:2x2 \\
      --output_dir /tmp/aot_modernbert
"""
from bert_jax.train.defaults import base_config, data_config, model_config, train_config
from bert_jax.train.phases import batch_warmup_phases

VARIANTS = ("tiny", "base", "large")
# Peak learning rates (the paper's Table 3) and its global batches, in sequences of 1,024.
_PEAK_LR = {"base": 8e-4, "large": 5e-4}
_BATCH = {"base": 4608, "large": 4928}
# Batch-size warmup: the stages' sizes and the tokens they take together.
_WARMUP = {"base": ((768, 1536, 3072), 50e9), "large": ((448, 896, 1792, 3584), 10e9)}
# The learning rate's warmup, in tokens (at the first stage's batch).
_LR_WARMUP_TOKENS = {"base": 3e9, "large": 2e9}
_EXTENSION = 0.1   # the share of the steps at 8,192 tokens


def get_config(arg=None):
  variant = (arg or "tiny").removeprefix("variant=")
  if variant not in VARIANTS:
    raise ValueError(f"unknown arg {arg!r}: expected one of {VARIANTS} (or variant=...)")
  c = base_config("bert_pretraining")
  c.data = data_config()
  c.data.mode = "mlm_packed"         # no NSP: whole sentences packed in rows, MLM only
  c.data.masked_lm_prob = 0.3
  c.data.eval_masked_lm_prob = 0.15  # validation stays BERT's task (as bert_tiny :demo)
  c.train = train_config(optimizer="stable_adamw", schedule="wsd", b1=0.9, b2=0.98,
                         eps=1e-6, grad_clip_norm=0.0)
  if variant == "tiny":
    c.model = model_config("modernbert/tiny", vocab_size=4096, max_len=128,
                           vocab_multiple=64, scan_layers=False)
    c.data.corpus = "embedded"
    c.data.vocab_size = 4096
    c.data.max_seq_length = 128
    c.data.max_predictions_per_seq = 40
    c.data.dupe_factor = 5
    c.train.update(batch_size=32, num_steps=1500, learning_rate=2e-3, warmup_steps=150,
                   decay_fraction=0.2, log_every=50, eval_every=500, eval_steps=0,
                   checkpoint_every=500, weight_decay=1e-5 / 2e-3)
    return c
  c.model = model_config(f"modernbert/{variant}", dtype="bfloat16", scan_layers=False,
                         vocab_multiple=64, remat_policy="none")
  c.data.vocab_size = c.model.vocab_size
  c.data.max_seq_length = 1024
  c.data.max_predictions_per_seq = 308   # 30% of 1,024, rounded up
  stages, tokens = _WARMUP[variant]
  c.train.update(batch_size=_BATCH[variant], num_steps=400_000,
                 learning_rate=_PEAK_LR[variant], weight_decay=1e-5 / _PEAK_LR[variant],
                 warmup_steps=round(_LR_WARMUP_TOKENS[variant] / (stages[0] * 1024)),
                 decay_fraction=0.1)
  c.train.phases = batch_warmup_phases(
      _BATCH[variant], 1024, tokens, stages, c.train.num_steps, fraction=1 - _EXTENSION,
      max_seq_length=1024, max_predictions_per_seq=308, rotary_base=10_000.0) + (
      dict(fraction=_EXTENSION, max_seq_length=8192, max_predictions_per_seq=2458,
           batch_size=_BATCH[variant] // 8, rotary_base=160_000.0),)
  return c
