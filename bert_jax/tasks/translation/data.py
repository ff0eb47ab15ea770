"""Translation data: sentence pairs from the numbers corpus, users' files or tfds, and
the shared subword vocabulary.

Sources (config.data.source):
  numbers   German -> English number words from `num2words` over 0..999,999, e.g.
            "dreihunderteinundzwanzig" -> "three hundred and twenty-one". The split of a
            number is fixed by a hash of it (90% train, 5% validation, 5% test), so the
            test numbers are never trained on, whatever the seed or sample sizes.
  file      a TSV of `source<TAB>target` lines, or two line-aligned text files.
  tfds      ted_hrlr_translate/pt_to_en, wmt14_translate/de-en (by name; network once).

Every reader returns (pairs, SkipLog): empty sides are skipped and counted, non-UTF-8
bytes are replaced and counted, a TSV line without a tab is an error naming file:line.
Token ids: 0 <pad>, 1 <s> (BOS), 2 </s> (EOS), 3 <unk>, then the learned subwords, one
vocabulary shared by source and target (Vaswani et al. 2017, Sec. 5.1).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import zlib
from typing import Iterable, Optional, Sequence

import numpy as np
import tokenizers

from bert_jax.tasks.skiplog import SkipLog

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
NUMBERS_MAX = 1_000_000
SPLIT_BUCKETS = {"train": (0, 90), "validation": (90, 95), "test": (95, 100)}
TFDS_LANGUAGES = {"ted_hrlr_translate/pt_to_en": ("pt", "en"),
                  "wmt14_translate/de-en": ("de", "en")}


@dataclasses.dataclass(frozen=True)
class Pair:
  source: str
  target: str
  where: str = ""  # file:line, tfds index or number, for messages


# ------------------------------------------------------------------- numbers corpus
def number_bucket(n: int) -> int:
  """0..99 from a hash of the number (crc32 of its decimal digits): the split key."""
  return zlib.crc32(b"%d" % n) % 100


@functools.lru_cache(maxsize=None)
def split_numbers(split: str) -> np.ndarray:
  """All numbers in 0..999,999 of `split` (train | validation | test), ascending."""
  if split not in SPLIT_BUCKETS:
    raise ValueError(f"numbers corpus split {split!r}; one of {sorted(SPLIT_BUCKETS)}.")
  lo, hi = SPLIT_BUCKETS[split]
  buckets = np.fromiter((number_bucket(n) for n in range(NUMBERS_MAX)), np.int64, NUMBERS_MAX)
  return np.flatnonzero((buckets >= lo) & (buckets < hi))


def number_pair(n: int) -> Pair:
  from num2words import num2words  # pylint: disable=g-import-not-at-top
  return Pair(num2words(int(n), lang="de"), num2words(int(n), lang="en"), f"number {int(n)}")


def numbers_sample(split: str, limit: int, seed: int = 0) -> np.ndarray:
  """`limit` numbers of `split` in a fixed pseudo-random order (all if limit <= 0)."""
  numbers = split_numbers(split)
  order = np.random.default_rng(seed).permutation(len(numbers))
  return numbers[order[:limit] if limit > 0 else order]


def numbers_pairs(split: str, limit: int, seed: int = 0) -> tuple[list[Pair], SkipLog]:
  pairs = [number_pair(n) for n in numbers_sample(split, limit, seed)]
  log = SkipLog(f"numbers:{split}")
  log.kept = len(pairs)
  return pairs, log


# ------------------------------------------------------------------------- files
def decode_lines(raw: bytes, name: str, log: SkipLog) -> list[str]:
  """Lines of `raw` without their newline; invalid UTF-8 replaced (and counted as name:line)."""
  lines = raw.split(b"\n")
  if lines and lines[-1] == b"":
    lines.pop()
  out = []
  for i, line in enumerate(lines, 1):
    line = line.removesuffix(b"\r")
    try:
      out.append(line.decode("utf-8"))
    except UnicodeDecodeError:
      log.note("non_utf8_replaced", f"{name}:{i}")
      out.append(line.decode("utf-8", errors="replace"))
  return out


def _lines(path: str, log: SkipLog) -> list[str]:
  """Lines of a text file (see decode_lines)."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"translation data file {path} does not exist.")
  with open(path, "rb") as f:
    return decode_lines(f.read(), path, log)


def _keep(pairs: list, log: SkipLog, source: str, target: str, where: str) -> None:
  if not source.strip():
    log.skip("empty_source", where)
  elif not target.strip():
    log.skip("empty_target", where)
  else:
    pairs.append(Pair(source.strip(), target.strip(), where))


def read_tsv(path: str) -> tuple[list[Pair], SkipLog]:
  """`source<TAB>target` per line. A line without a tab is an error naming file:line."""
  log = SkipLog(path)
  pairs: list[Pair] = []
  for i, line in enumerate(_lines(path, log), 1):
    if not line.strip():
      log.skip("empty_line", f"{path}:{i}")
      continue
    if "\t" not in line:
      raise ValueError(f"{path}:{i}: no tab between source and target in {line[:80]!r} "
                       "(expected `source<TAB>target`).")
    source, target = line.split("\t", 1)
    _keep(pairs, log, source, target, f"{path}:{i}")
  log.kept = len(pairs)
  return pairs, log


def read_aligned(source_path: str, target_path: str) -> tuple[list[Pair], SkipLog]:
  """Two text files, line i of one the translation of line i of the other."""
  log = SkipLog(f"{source_path} + {target_path}")
  sources, targets = _lines(source_path, log), _lines(target_path, log)
  if len(sources) != len(targets):
    raise ValueError(f"{source_path} has {len(sources)} lines but {target_path} has "
                     f"{len(targets)}: aligned files need one target line per source line.")
  pairs: list[Pair] = []
  for i, (s, t) in enumerate(zip(sources, targets), 1):
    _keep(pairs, log, s, t, f"{source_path}:{i}")
  log.kept = len(pairs)
  return pairs, log


def read_file_split(train_or_eval_file: str) -> tuple[list[Pair], SkipLog]:
  """A data.train_file / eval_file value: `x.tsv` or `x.src,x.tgt` (two aligned files)."""
  if "," in train_or_eval_file:
    source_path, target_path = train_or_eval_file.split(",", 1)
    return read_aligned(source_path, target_path)
  return read_tsv(train_or_eval_file)


# -------------------------------------------------------------------------- tfds
def load_tfds(name: str, split: str, data_dir: Optional[str] = None,
              download: bool = True) -> tuple[list[Pair], SkipLog]:
  """Pairs of a tfds translation dataset (`TFDS_LANGUAGES`), records in tfds order."""
  if name not in TFDS_LANGUAGES:
    raise ValueError(f"unknown tfds translation dataset {name!r}; one of "
                     f"{sorted(TFDS_LANGUAGES)}.")
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  src_key, tgt_key = TFDS_LANGUAGES[name]
  ds = tfds.load(name, split=split, data_dir=data_dir or None, download=download,
                 shuffle_files=False)
  log = SkipLog(f"{name}:{split}")
  pairs: list[Pair] = []
  for i, record in enumerate(tfds.as_numpy(ds)):
    s, t = (record[k].decode("utf-8", errors="replace") for k in (src_key, tgt_key))
    _keep(pairs, log, s, t, f"{name}:{split}:{i}")
  log.kept = len(pairs)
  return pairs, log


# --------------------------------------------------------------------- vocabulary
def train_tokenizer(texts: Iterable[str], vocab_size: int) -> tokenizers.Tokenizer:
  """A byte-pair-encoding vocabulary over source and target texts together.

  Metaspace marks word starts with ▁ so that decoding restores the spaces exactly
  (detokenized text is what sacreBLEU scores); NFKC keeps equivalent Unicode forms one.
  """
  tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
  tok.normalizer = tokenizers.normalizers.NFKC()
  tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
  tok.decoder = tokenizers.decoders.Metaspace()
  trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size,
                                           special_tokens=list(SPECIAL_TOKENS),
                                           show_progress=False)
  tok.train_from_iterator(texts, trainer)
  check_specials(tok)
  return tok


def check_specials(tok: tokenizers.Tokenizer) -> None:
  got = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
  if got != [PAD, BOS, EOS, UNK]:
    raise ValueError(f"translation tokenizer must map {SPECIAL_TOKENS} to 0..3, got {got}.")


def encode(tok: tokenizers.Tokenizer, texts: Sequence[str], max_len: int,
           log: Optional[SkipLog] = None, eos: bool = True,
           where: Sequence = ()) -> np.ndarray:
  """[N, max_len] int32 ids, </s> appended when `eos`; longer rows are cut (counted)."""
  out = np.zeros((len(texts), max_len), np.int32)
  room = max_len - int(eos)
  for i, enc in enumerate(tok.encode_batch(list(texts), add_special_tokens=False)):
    ids = enc.ids
    if len(ids) > room:
      if log is not None:
        log.note("truncated", where[i] if len(where) > i else i,
                 f"{len(ids)} tokens > {room}")
      ids = ids[:room]
    if eos:
      ids = list(ids) + [EOS]
    out[i, :len(ids)] = ids
  return out


def decode(tok: tokenizers.Tokenizer, rows: np.ndarray) -> list[str]:
  """Detokenized text of id rows, cut at the first </s> (special ids dropped)."""
  texts = []
  for row in np.asarray(rows):
    row = [int(x) for x in row]
    if EOS in row:
      row = row[:row.index(EOS)]
    texts.append(tok.decode([x for x in row if x >= UNK], skip_special_tokens=False))
  return texts
