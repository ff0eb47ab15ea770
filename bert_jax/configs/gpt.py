"""GPT causal language modelling (task `lm`): arg "SIZE[,CORPUS]".

SIZE tiny (default): 4 layers, 128 wide, a 4,096-token byte-level BPE trained on the
embedded corpus; offline, under 15 minutes on an idle 2-core CPU, data preparation and
compile included:
  python -m bert_jax.main --config configs/gpt.py --workdir workdirs/gpt_tiny
then talk to it:
  python -m bert_jax.generate --checkpoint workdirs/gpt_tiny --prompt "The city of"

SIZE small: GPT-2 124M (Radford et al. 2019) with nanoGPT's recipe: AdamW β2 0.95,
lr 6e-4 warmup 2,000 then cosine to 10%, weight decay 0.1 off norms, biases and
embeddings, gradient clip 1.0, 1,024-token rows of 480 x 1,024 = ~0.5M tokens a step
(batch 480 via 16 accumulation steps is for accelerators; lower it on CPU):
  python -m bert_jax.main --config configs/gpt.py:small,tfds --workdir gs://b/gpt \
    --config.data.tfds_name=wikipedia/20230601.en

CORPUS embedded (default) | text (files in google-research/bert's format, blank line
between documents: --config.data.text_files='/corpus/*.txt') | tfds (a tfds text dataset
by name: --config.data.tfds_name=... [--config.data.tfds_text_key=text]). A given
tokenizer instead of a trained one: --config.data.vocab_path=DIR_OR_TOKENIZER_JSON
(tokenizer.json, or vocab.json + merges.txt as GPT-2 ships them; 50,257 tokens for GPT-2's).
"""
import ml_collections
from ml_collections import config_dict

from bert_jax.train.defaults import base_config, model_config, train_config

SIZES = ("tiny", "small")
CORPORA = ("embedded", "text", "tfds")


def data_config(corpus: str, vocab_size: int, seq_len: int) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.corpus = corpus
  c.text_files = ""                  # corpus=text: comma-separated globs
  c.tfds_name = ""                   # corpus=tfds
  c.tfds_text_key = "text"
  c.tfds_split = "train"
  c.tfds_data_dir = config_dict.placeholder(str)
  c.validation_fraction = 0.02       # held-out documents, by a hash of their text
  c.max_line_chars = 20000
  c.data_dir = "~/bert_jax_data"     # documents, tokenizer and token streams (hashed dirs)
  c.vocab_path = config_dict.placeholder(str)  # None: train a byte-level BPE
  c.vocab_size = vocab_size
  c.max_seq_length = seq_len
  c.num_workers = 0
  c.read_threads = 2
  c.prefetch_batches = 4
  c.seed = 0
  return c


def get_config(arg=None):
  size, _, corpus = (arg or "tiny").partition(",")
  corpus = corpus or "embedded"
  if size not in SIZES or corpus not in CORPORA:
    raise ValueError(f"unknown arg {arg!r}: expected SIZE[,CORPUS] with SIZE in {SIZES} and "
                     f"CORPUS in {CORPORA}.")
  c = base_config("lm")
  if size == "tiny":
    c.model = model_config("gpt/small", num_layers=4, hidden_size=128, num_heads=4,
                           mlp_dim=512, vocab_size=4096, max_len=128,
                           attention_dropout_rate=0.0)
    c.data = data_config(corpus, vocab_size=4096, seq_len=128)
    c.train = train_config(
        batch_size=32, num_steps=600, learning_rate=2e-3, b2=0.95, eps=1e-8,
        weight_decay=0.1, schedule="cosine", warmup_steps=100, grad_clip_norm=1.0,
        log_every=50, eval_every=200, eval_steps=0, checkpoint_every=200)
  else:
    # No attention dropout (nanoGPT's GPT-2 recipe): the fused kernels (splash, cuDNN) apply.
    c.model = model_config("gpt/small", attention_dropout_rate=0.0, dropout_rate=0.0)
    c.data = data_config(corpus, vocab_size=50257, seq_len=1024)
    c.train = train_config(
        batch_size=480, grad_accum_steps=16, num_steps=600_000, learning_rate=6e-4,
        b2=0.95, eps=1e-8, weight_decay=0.1, schedule="cosine", warmup_steps=2000,
        grad_clip_norm=1.0, log_every=100, eval_every=2000, eval_steps=200,
        checkpoint_every=2000)
    c.model.dtype = "bfloat16"
  c.train.decay_embeddings = False   # no weight decay on the token/position tables
  c.train.min_lr_fraction = 0.1      # cosine floor (nanoGPT: min_lr = lr / 10)
  c.lock()
  return c


def get_sweep(hyper):
  """Attention implementation x global batch for `launch/sweep.py --aot TOPOLOGY` with
  SIZE small (GPT-2 124M at 1,024 tokens): the largest batch each attention fits in one
  step (no accumulation), splash (kernels/splash.py) against the written-out XLA softmax.

    python launch/sweep.py --config configs/gpt.py:small --aot v5e:4x4
  """
  return hyper.product([
      hyper.sweep("config.model.attention_impl", ["xla", "splash"]),
      hyper.sweep("config.train.grad_accum_steps", [1]),
      hyper.sweep("config.train.batch_size", [64, 128, 256, 512, 1024, 2048, 4096]),
  ])
