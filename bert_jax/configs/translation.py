"""Translation: the Vaswani Transformer (or the GRU + attention baseline) on sentence pairs.

Run (offline; German -> English number words, ≤ 15 minutes on 2 CPU cores):
  python -m bert_jax.main --config configs/translation.py:numbers --workdir workdirs/numbers
then translate the never-seen test split it wrote and score it:
  python -m bert_jax.translate --workdir workdirs/numbers --beam_size 4 \\
      --input workdirs/numbers/data/test.de --output workdirs/numbers/test.hyp
  sacrebleu workdirs/numbers/data/test.en -i workdirs/numbers/test.hyp -m bleu chrf
The baseline on the same data: configs/translation.py:numbers_gru.
Your own data (a TSV of source<TAB>target, or 'train.src,train.tgt' aligned files):
  python -m bert_jax.main --config configs/translation.py:file --workdir workdirs/mine \\
      --config.data.train_file=train.tsv --config.data.eval_file=dev.tsv
tfds (network once; wmt14 needs requirements-tf.txt), with the paper's base model:
  python -m bert_jax.main --config configs/translation.py:wmt14_translate/de-en \\
      --workdir workdirs/wmt14
arg: numbers (default) | numbers_gru | file | ted_hrlr_translate/pt_to_en |
wmt14_translate/de-en | transformer/base | transformer/big (the last two: wmt14 de-en).
"""
import ml_collections

from bert_jax.train.defaults import base_config, model_config, train_config

TFDS = ("ted_hrlr_translate/pt_to_en", "wmt14_translate/de-en")
ARGS = ("numbers", "numbers_gru", "file") + TFDS + ("transformer/base", "transformer/big")


def _data(source: str, **overrides) -> ml_collections.ConfigDict:
  d = ml_collections.ConfigDict()
  d.source = source                  # numbers | file | tfds
  d.name = ""                        # tfds: the dataset name
  d.train_split, d.eval_split, d.test_split = "train", "validation", "test"
  d.train_file = ""                  # file: x.tsv or "x.src,x.tgt"
  d.eval_file = ""
  d.test_file = ""
  d.tfds_data_dir = ""
  d.vocab_size = 32000               # shared source/target BPE vocabulary (tokenizers)
  d.max_source_length = 128          # subwords incl. </s>; longer sources are cut (counted)
  d.max_target_length = 128
  d.pack_length = 0                  # > 0: train rows pack pairs up to this many source and
                                     # target subwords (batches by token count); 0: a pair a row
  # Eval/translate batches sorted by length and padded a side to the smallest multiple of
  # this holding their longest source (target), the last bucket the max length: at 128,
  # buckets 32, 64, 96, 128 (one compile per (source, target) shape used); 0: every
  # batch padded to max_source/target_length (the same metrics and hypotheses).
  d.length_bucket = 32
  d.max_train_examples = 0           # 0: all
  d.max_eval_examples = 1000         # BLEU during training on this many eval pairs
  d.num_test_examples = 1000         # numbers: test pairs written to workdir/data/
  d.update(overrides)
  return d


def _decode() -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(
      eval_beam_size=4,              # 1: greedy; 0: no decoding in eval (no BLEU)
      alpha=0.6,                     # GNMT length penalty ((5 + len) / 6)^alpha
      max_extra_length=50))          # a hypothesis has at most source length + this


def _paper(c: ml_collections.ConfigDict, variant: str) -> None:
  """Vaswani et al. (2017) Sec. 5.1, 5.3-5.4: batches of about 25000 source and 25000
  target tokens (here 128 rows packed to 256 subwords a side: 32768 slots, ~25k tokens at
  the packer's typical ~80% fill), Adam(0.9, 0.98, 1e-9), lr = d^-0.5 ·
  min(step^-0.5, step · 4000^-1.5), dropout 0.1 (big: 0.3), label smoothing 0.1."""
  c.model = model_config(variant, vocab_size=c.data.vocab_size, max_len=256)
  c.data.pack_length = 256
  c.train = train_config(
      batch_size=128, num_steps=100_000, optimizer="adamw", b2=0.98, eps=1e-9,
      weight_decay=0.0, schedule="inverse_sqrt", warmup_steps=4000,
      learning_rate=c.model.hidden_size ** -0.5 * 4000 ** -0.5, grad_clip_norm=0.0,
      log_every=100, eval_every=5000, eval_steps=0, checkpoint_every=5000,
      best_metric="bleu", best_mode="max")
  c.train.label_smoothing = 0.1


def get_config(arg=None):
  arg = arg or "numbers"
  if arg not in ARGS:
    raise ValueError(f"unknown arg {arg!r}; one of {ARGS}")
  c = base_config("translation")
  c.architecture = "gru" if arg == "numbers_gru" else "transformer"
  c.gru = ml_collections.ConfigDict(dict(embed_dim=128, hidden_size=192,
                                         attention_units=128))
  c.decode = _decode()
  if arg in ("numbers", "numbers_gru"):
    # Buckets: sources 8, 10; targets 8, 16. The validation sources (5-8 subwords) all
    # run at 8: one eval shape, 8% fewer positions. Buckets of 4 save 19% but add a
    # shape: a ~6 s compile on 2 CPU cores for batches of ~0.1 s (bench/RESULTS.md).
    c.data = _data("numbers", vocab_size=256, max_source_length=10, max_target_length=16,
                   max_eval_examples=500, length_bucket=8)
    c.model = model_config("transformer/base", vocab_size=256, max_len=16, hidden_size=128,
                           num_layers=2, num_decoder_layers=2, num_heads=4, mlp_dim=512,
                           dropout_rate=0.1)
    c.train = train_config(
        # 240 x 128 = 31k of the 900k training pairs: teacher-forced exact match on the
        # validation split reached 99.4% after 200 such steps at this rate (tuning runs).
        batch_size=128, num_steps=240, optimizer="adamw", b2=0.98, eps=1e-9,
        weight_decay=0.0, schedule="linear", warmup_steps=40, learning_rate=3e-3,
        grad_clip_norm=1.0, log_every=20, eval_every=120, eval_steps=0,
        checkpoint_every=120, keep_checkpoints=2, best_metric="bleu", best_mode="max")
    c.train.label_smoothing = 0.1
    c.decode.eval_beam_size = 1      # greedy during training; the test split: beam 4
    return c
  if arg == "file":
    c.data = _data("file")
  elif arg in TFDS:
    c.data = _data("tfds", name=arg)
  else:  # transformer/base | transformer/big: the paper's WMT'14 En-De setup, here de-en
    c.data = _data("tfds", name="wmt14_translate/de-en", vocab_size=37000)
  _paper(c, arg if arg.startswith("transformer/") else "transformer/base")
  return c
