"""word2vec skip-gram with negative sampling on the embedded corpus, gensim's defaults.

Run (offline; on a quiet 2-core CPU about 7 s of training after a 7 s corpus parse):
  python -m bert_jax.main --config configs/word2vec.py --workdir workdirs/word2vec
Your own text (one sentence per line): --config.data.corpus=text \\
  --config.data.text_glob='/data/*.txt'
The workdir gets TensorBoard events, metrics.jsonl and an Orbax checkpoint per epoch
(checkpoints/); rerunning the same command resumes from the last one.
Query the exported vectors:
  python -m bert_jax.word2vec.query --vectors workdirs/word2vec/vectors.bin \\
    --neighbors king --analogy king,man,woman --topn 10
The defaults are gensim 4's Word2Vec(sentences, sg=1, hs=0, negative=5, vector_size=100,
window=5, min_count=5, sample=1e-3, alpha=0.025, min_alpha=1e-4, epochs=5), including its
learning-rate decay by sentences and its initial vector scale. word2vec.c's instead:
  --config.train.lr_decay=words --config.model.init_scale=0.5
"""
import ml_collections

from bert_jax.train.defaults import wandb_config


def get_config(arg=None):
  if arg:  # a `word2vec.py:x` is a typo, not a variant: there are none
    raise ValueError(f"unknown arg {arg!r}; configs/word2vec.py takes none (numbers via "
                     "--config.x=y)")
  c = ml_collections.ConfigDict()
  c.task = "word2vec"
  c.seed = 0
  c.mesh_shape = (-1, 1, 1)        # (data, fsdp, tensor): pairs over data, rows over tensor

  c.model = ml_collections.ConfigDict()
  c.model.embed_dim = 100
  # Input vectors start uniform in [-init_scale/dim, init_scale/dim): gensim 4's 1.0
  # (KeyedVectors.prep_vectors), word2vec.c's and gensim 3's 0.5.
  c.model.init_scale = 1.0

  c.data = ml_collections.ConfigDict()
  c.data.corpus = "embedded"       # embedded (gensim's lee_background + enwiki excerpt) | text
  c.data.text_glob = ""            # files for corpus=text, one sentence per line
  c.data.min_count = 5
  c.data.sample = 1e-3             # subsampling threshold (0: off)
  c.data.window = 5                # max window; each centre draws 1..window

  c.train = ml_collections.ConfigDict()
  c.train.epochs = 5
  c.train.negatives = 5
  c.train.ns_exponent = 0.75       # negatives ~ counts ** 0.75
  c.train.alpha = 0.025            # linear decay to min_alpha over all epochs
  c.train.min_alpha = 1e-4
  # Progress through an epoch for that decay (word2vec/schedule.py): "sentences", gensim
  # 4's (sentences pushed / sentences, in jobs of 10000 words), or "words", word2vec.c's
  # (tokens / tokens). They differ where sentence lengths vary; gensim's is what users
  # compare with.
  c.train.lr_decay = "sentences"
  c.train.chunk_size = 256         # pairs per SGD update (one scatter-add)
  c.train.chunks_per_step = 512    # SGD updates per dispatched step (a loop on device)
  c.train.prefetch = 2             # batches the host thread builds ahead
  c.train.log_every_steps = 5
  # Orbax checkpoints in workdir/checkpoints after every epoch (bert_jax.checkpoint.manager, as
  # BERT's loop), and at the step a SIGTERM / Ctrl-C stops after: a rerun on the same
  # workdir resumes right after the newest one's step, inside its epoch too.
  c.train.checkpoint = True
  # Also every N steps inside an epoch (0: only the above): for epochs long enough that a
  # SIGKILL, which leaves no time to save, should not cost one (each save writes both
  # tables).
  c.train.checkpoint_every_steps = 0
  c.train.keep_checkpoints = 3
  c.train.async_checkpoints = True
  # CPU only: one XLA thread, the other cores build batches (see
  # hardware/cpu_threads.start_cpu_backend_single_threaded).
  c.train.single_thread_xla_cpu = True

  c.eval = ml_collections.ConfigDict()
  c.eval.restrict_vocab = 300000   # analogies / pairs over the top-N words, as gensim

  c.export_format = "both"         # vectors.txt / vectors.bin: text | binary | both | none
  c.wandb = wandb_config()         # Weights & Biases: --config.wandb.project=NAME ('' = off)
  return c
