"""WordPiece tokenizers through the `tokenizers` library: train, save, load.

Every tokenizer built here is the BERT pipeline: BertNormalizer (clean text, split
CJK characters, lowercase + strip accents when uncased) -> BertPreTokenizer
(whitespace and punctuation) -> WordPiece (`##` continuation prefix, words over 100
characters become [UNK]) -> WordPiece decoder, with the five special tokens registered
as added tokens so "[MASK]" in text stays one token, as in transformers' BertTokenizer.

Loaded tokenizers never pad or truncate (a tokenizer.json saved for a sentence
encoder often carries `Fixed(128)` padding): callers own sequence layout.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
from typing import Iterable, Optional

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from bert_jax.runtime import paths
from bert_jax.data import wordpiece

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# Training order puts [PAD] at id 0: padded batches are zeros, as in google-research/bert.
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)


@dataclasses.dataclass(frozen=True)
class SpecialIds:
  """Ids of the special tokens of one vocabulary."""
  pad: int
  unk: int
  cls: int
  sep: int
  mask: int

  @property
  def all(self) -> tuple[int, ...]:
    return (self.pad, self.unk, self.cls, self.sep, self.mask)

  @classmethod
  def from_tokenizer(cls, tokenizer: Tokenizer, source: str = "the vocabulary") -> "SpecialIds":
    ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}
    _check_special(ids, source)
    return cls(*(ids[tok] for tok in SPECIAL_TOKENS))


def _check_special(ids: dict, source: str) -> None:
  missing = [tok for tok in SPECIAL_TOKENS if ids.get(tok) is None]
  if missing:
    raise ValueError(
        f"{source} lacks the special token(s) {', '.join(missing)}; a BERT vocabulary needs "
        f"all of {', '.join(SPECIAL_TOKENS)}.")


def _bert_pipeline(model: models.WordPiece, lowercase: bool) -> Tokenizer:
  tok = Tokenizer(model)
  # strip_accents=None follows `lowercase`, exactly BertTokenizer's default.
  tok.normalizer = normalizers.BertNormalizer(
      clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tok.decoder = decoders.WordPiece(prefix="##")
  return tok


def _finish(tok: Tokenizer, source: str) -> Tokenizer:
  """Registers specials as added tokens, adds [CLS] A [SEP] B [SEP] post-processing."""
  ids = SpecialIds.from_tokenizer(tok, source)
  tok.add_special_tokens(list(SPECIAL_TOKENS))
  tok.post_processor = processors.BertProcessing((SEP, ids.sep), (CLS, ids.cls))
  tok.no_padding()
  tok.no_truncation()
  return tok


def train_wordpiece(texts: Iterable[str], vocab_size: int = 30522, lowercase: bool = True,
                    min_frequency: int = 2, limit_alphabet: int = 1000) -> Tokenizer:
  """Trains a WordPiece vocabulary; [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.

  Args:
    texts: an iterable of strings (sentences or documents), streamed once.
    vocab_size: final size including the specials and the alphabet. Small corpora may
      end below it (WordPiece stops when no pair is frequent enough).
    lowercase: uncased model (lowercase + strip accents).
    min_frequency: minimum count of a merged pair.
    limit_alphabet: maximum number of distinct characters kept (the rest become [UNK]).

  Deterministic (data/wordpiece.py): the same texts give the same vocabulary in any
  order, on any host, unlike tokenizers' own trainer (huggingface/tokenizers#1794).
  """
  counts = wordpiece.count_words(texts, lowercase)
  return from_word_counts(counts, vocab_size, lowercase, min_frequency, limit_alphabet)


def from_word_counts(counts, vocab_size: int, lowercase: bool, min_frequency: int = 2,
                     limit_alphabet: int = 1000) -> Tokenizer:
  """The BERT tokenizer of the vocabulary wordpiece.train learns from word counts."""
  tokens = wordpiece.train(counts, vocab_size, SPECIAL_TOKENS, min_frequency, limit_alphabet)
  model = models.WordPiece({t: i for i, t in enumerate(tokens)}, unk_token=UNK,
                           max_input_chars_per_word=100)
  return _finish(_bert_pipeline(model, lowercase), "the trained vocabulary")


def save_vocab(tokenizer: Tokenizer, path: str) -> None:
  """Writes vocab.txt: one token a line, line number = id (google-research/bert layout)."""
  vocab = tokenizer.get_vocab(with_added_tokens=True)  # token -> id
  by_id = sorted(vocab.items(), key=lambda kv: kv[1])
  if [i for _, i in by_id] != list(range(len(by_id))):
    raise ValueError("Token ids are not contiguous from 0; cannot write a vocab.txt.")
  # Atomic (local or gs://): a crash never leaves a half-written vocab to reuse.
  paths.write_atomically(path, "".join(tok + "\n" for tok, _ in by_id))


def read_vocab(path: str) -> dict[str, int]:
  """vocab.txt (local or gs://, read through epath) -> {token: line number}; a token on
  two lines is a ValueError naming both."""
  data = paths.resolve(path).read_bytes()
  try:
    # Text mode as open() has it (universal newlines); only the newline is stripped: a
    # vocab may hold whitespace-like tokens.
    with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8") as f:
      tokens = [line.rstrip("\n") for line in f]
  except UnicodeDecodeError as e:  # no skipping: a dropped line would shift every id after it
    line = data[:e.start].count(b"\n") + 1
    raise ValueError(f"{path}:{line}: not UTF-8 ({e.reason}); a vocab.txt is UTF-8 text, "
                     "one token a line.") from e
  vocab = {}
  for i, token in enumerate(tokens):
    if token in vocab:  # one of the two ids would never be produced, silently
      raise ValueError(f"{path}:{i + 1}: token {token!r} again (first on line "
                       f"{vocab[token] + 1}); a vocab.txt holds each token once.")
    vocab[token] = i
  return vocab


def _read_json(path):
  try:
    return json.loads(paths.resolve(path).read_bytes().decode("utf-8"))
  except (ValueError, RecursionError) as e:
    raise ValueError(f"{path} is not valid UTF-8 JSON: {str(e)[:200]}") from e


def _config_lowercase(config_path: str) -> Optional[bool]:
  """tokenizer_config.json's do_lower_case (None if absent)."""
  config = _read_json(config_path)
  value = config.get("do_lower_case") if isinstance(config, dict) else None
  if value is not None and not isinstance(value, bool):
    raise ValueError(f"{config_path}: do_lower_case must be true or false, got {value!r}.")
  return value


def _guess_lowercase(vocab: dict[str, int]) -> bool:
  """Uncased vocabs hold no ASCII capital outside bracketed specials like [UNK].

  Only ASCII counts: Google's uncased vocab still holds a few non-ASCII capitals
  (e.g. the double-struck R), while a cased one holds thousands of "The"-like tokens.
  """
  return not any(any("A" <= c <= "Z" for c in tok) for tok in vocab
                 if not (tok.startswith("[") and tok.endswith("]")))


def load_tokenizer(path_or_dir: str, lowercase: Optional[bool] = None) -> Tokenizer:
  """Loads a BERT WordPiece tokenizer; ids match transformers' BertTokenizer.

  Args:
    path_or_dir: a vocab.txt, a tokenizer.json, or a directory holding either (an HF
      checkpoint directory: tokenizer.json is preferred, else vocab.txt with
      tokenizer_config.json's `do_lower_case`).
    lowercase: force uncased/cased normalization. None: tokenizer.json's own
      normalizer, else tokenizer_config.json's `do_lower_case`, else guessed from the
      vocab (no upper-case tokens -> uncased).

  Raises:
    FileNotFoundError: nothing loadable at the path.
    ValueError: the vocabulary lacks a special token ([PAD] [UNK] [CLS] [SEP] [MASK]).
  """
  # Local or gs:// (a checkpoint's tokenizer dir in a gs:// workdir): files are read
  # through epath into memory, as tokenizers' from_file opens local paths only.
  path = paths.resolve(os.path.expanduser(path_or_dir))
  config_path = None
  if path.is_dir():
    config_path = path / "tokenizer_config.json"
    for name in ("tokenizer.json", "vocab.txt"):
      if (path / name).exists():
        path = path / name
        break
    else:
      raise FileNotFoundError(f"No tokenizer.json or vocab.txt in {path_or_dir}.")
  elif not path.exists():
    raise FileNotFoundError(f"Tokenizer file {path_or_dir} does not exist.")

  if path.name.endswith(".json"):
    try:
      tok = Tokenizer.from_str(path.read_bytes().decode("utf-8"))
    except Exception as e:  # pylint: disable=broad-except  (tokenizers raises bare Exception)
      raise ValueError(f"{path} is not a readable tokenizer.json: {str(e)[:200]}") from e
    if not isinstance(tok.model, models.WordPiece):
      raise ValueError(f"{path} is a {type(tok.model).__name__} tokenizer, not WordPiece.")
    if lowercase is not None:
      tok.normalizer = normalizers.BertNormalizer(
          clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
    return _finish(tok, path)

  vocab = read_vocab(path)
  _check_special(vocab, path)  # before building: a clear error, not a tokenizers panic
  if lowercase is None and config_path and config_path.exists():
    lowercase = _config_lowercase(config_path)
  if lowercase is None:
    lowercase = _guess_lowercase(vocab)
  model = models.WordPiece(vocab, unk_token=UNK, max_input_chars_per_word=100)
  return _finish(_bert_pipeline(model, lowercase), path)


def continuation_mask(tokenizer: Tokenizer) -> np.ndarray:
  """[vocab] bool: True for `##` pieces, which whole-word masking keeps with their word."""
  out = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), dtype=bool)
  for token, i in tokenizer.get_vocab(with_added_tokens=True).items():
    out[i] = token.startswith("##")
  return out


def keep_or_write(tokenizer: Tokenizer, path: str, source: str) -> None:
  """A run's tokenizer.json, written atomically into a new workdir. A workdir that has
  one keeps it when it is the same tokenizer, and a rerun with another one (`source`:
  where this run's came from) is refused with a ValueError before anything is written:
  that workdir's checkpoints were trained with its own."""
  target = paths.resolve(path)
  if not target.exists():
    paths.write_atomically(path, tokenizer.to_str())
    return
  try:
    saved = Tokenizer.from_str(target.read_text())
  except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception
    raise ValueError(f"{path} is not a readable tokenizer.json ({str(e)[:120]}): a write "
                     "cut short? Delete it and rerun: it is written again from "
                     f"{source}.") from None
  mine, theirs = json.loads(tokenizer.to_str()), json.loads(saved.to_str())
  if any(mine.get(k) != theirs.get(k) for k in ("model", "normalizer", "pre_tokenizer")):
    raise ValueError(
        f"{path} ({saved.get_vocab_size()} tokens) is another tokenizer than this run's "
        f"(from {source}, {tokenizer.get_vocab_size()} tokens): that workdir was trained "
        "with its own; use a new --workdir, or the init_from it was trained from.")
