"""BERT-tiny (2 layers, 128 wide) pretrained on the embedded corpus: the CPU demo.

arg: bert (default) | demo.
  bert: BERT's original recipe (Devlin et al. 2019): post-LN, MLM + NSP pairs, dropout
        0.1 on the hidden states, linear warmup + decay, an 8,192-token vocabulary.
  demo: what `make demo` trains: the moves that raised the held-out MLM accuracy at the
        demo's 8-minute CPU budget (bench/time_to_quality/demo_recipe.py; bench/RESULTS.md):
        Cramming's (Geiping & Goldstein 2022) MLM only on packed rows (no NSP), pre-LN, no
        dropout; rotary positions (RoPE) instead of the learned absolute table, which a
        2-layer model needs most of the budget to turn into "my neighbours"; 30% of the
        tokens masked (Wettig et al. 2023), scored on BERT's 15% validation masks; peak
        learning rate 2e-3 reached half-way (one-cycle); Cramming's smaller vocabulary,
        4,096 WordPiece tokens, whose 25% faster step buys 1500 steps in the time of
        1200 at 8,192 (docs/performance-notes.md, "The demo's fill-mask goal").
Run (offline; data preparation included):
  python -m bert_jax.main --config configs/bert_tiny.py:demo --workdir workdirs/bert_tiny_demo
  python -m bert_jax.main --config configs/bert_tiny.py --workdir workdirs/bert_tiny
Smaller/faster: --config.train.num_steps=200. TensorBoard: tensorboard --logdir workdirs/
"""
from bert_jax.train.defaults import base_config, data_config, model_config, train_config

VARIANTS = ("bert", "demo")


def get_config(arg=None):
  arg = arg or "bert"
  if arg not in VARIANTS:
    raise ValueError(f"unknown arg {arg!r}: expected one of {VARIANTS}")
  c = base_config("bert_pretraining")
  c.model = model_config("bert/tiny", vocab_size=8192, max_len=128,
                         attention_dropout_rate=0.0)
  c.data = data_config()
  c.data.corpus = "embedded"
  c.data.vocab_size = 8192
  c.data.max_seq_length = 128
  c.data.max_predictions_per_seq = 20
  c.data.dupe_factor = 5
  c.train = train_config(
      batch_size=32, num_steps=1200, learning_rate=1e-3, warmup_steps=120,
      log_every=50, eval_every=400, eval_steps=20, checkpoint_every=400)
  c.train.warmup_fraction = 0.0      # > 0: warmup = this fraction of the steps (one-cycle: 0.5)
  if arg == "demo":
    c.data.mode = "mlm_packed"       # no NSP: every row is whole sentences, MLM only
    c.model.pre_ln = True
    c.model.dropout_rate = 0.0
    c.model.position = "rotary"
    c.data.masked_lm_prob = 0.3
    c.data.max_predictions_per_seq = 40
    c.data.eval_masked_lm_prob = 0.15  # the validation task stays BERT's (and :bert's)
    c.train.learning_rate = 2e-3
    c.train.warmup_fraction = 0.5    # one-cycle: up for half the steps, down for the rest
    c.model.vocab_size = c.data.vocab_size = 4096
    c.train.num_steps = 1500
    c.train.eval_every = c.train.checkpoint_every = 500
    c.train.eval_steps = 0           # the whole validation split (what demo_report scores)
  return c
