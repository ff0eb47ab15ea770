"""Language-model data: documents -> byte-level BPE -> one token stream per split -> packed rows.

  prepared = prepare(config.data)                # idempotent, config-hashed dirs
  it = train_iterator(config.data, prepared, batch_size, shard_index, shard_count, seed)

Stream. Each document is encoded as `<|endoftext|> d_1 ... d_n` and the documents are
concatenated (GPT-2's convention: the separator opens every document, so its first
token is predicted from the separator, and the last one predicts the next separator,
i.e. "the document ends"). Stream files: tokens.npy [N] int32 and starts.npy [D] int64
(the offset of each document's separator), per split.

Rows. Row r of length L takes inputs stream[rL : rL+L] and targets stream[rL+1 : rL+L+1],
so every stream token but the first is a target exactly once. Document boundaries are
respected: `segment_ids` number the documents within the row from 1 (attention stays
inside one), `positions` restart at 0 at the row start and at every document start.
Eval rows past the end of the stream are padding: segment 0, weight 0.

Bits per byte. A target token's bytes are its UTF-8 bytes (a byte-level BPE token is a
byte string: one character of its alphabet per byte); the separator counts as 1 byte,
the newline that separates documents in a raw text file. bits/byte = Σ NLL / ln 2 / Σ bytes.

Documents come from the BERT pipeline's builders (embedded gensim corpus, text files,
tfds by name), held-out documents by a hash of their text (data/prepare.py).
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import sys
import zlib

import grain
import numpy as np
import tensorflow_datasets as tfds

from bert_jax.runtime import paths
from bert_jax.data import levels, loader, mirror, sampling
from bert_jax.data import prepare as prepare_lib
from bert_jax.interop import gpt2

EOT = gpt2.EOT
SPLITS = ("train", "validation")
_FORMAT = "1"  # bump when the stream layout changes


@dataclasses.dataclass(frozen=True)
class LmData:
  """What `prepare` built."""
  streams_dir: str            # <split>/tokens.npy, <split>/starts.npy, prepared.json
  tokenizer_path: str         # a tokenizer.json
  vocab_size: int
  eot_id: int
  stats: dict                 # split -> {"documents", "tokens", "bytes"}

  def tokens(self, split: str) -> np.ndarray:
    return np.load(os.path.join(self.streams_dir, split, "tokens.npy"), mmap_mode="r")

  def starts(self, split: str) -> np.ndarray:
    return np.load(os.path.join(self.streams_dir, split, "starts.npy"))

  def token_bytes(self) -> np.ndarray:
    return np.load(os.path.join(self.streams_dir, "token_bytes.npy"))


# ------------------------------------------------------------------------- tokenizer
def train_bpe(texts, vocab_size: int):
  """A GPT-2 style byte-level BPE (`tokenizers`) with <|endoftext|> as its one special."""
  from tokenizers import ByteLevelBPETokenizer  # pylint: disable=g-import-not-at-top
  bpe = ByteLevelBPETokenizer(add_prefix_space=False)
  bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                          special_tokens=[EOT], show_progress=False)
  return bpe._tokenizer  # the plain tokenizers.Tokenizer


def token_byte_lengths(tok) -> np.ndarray:
  """[vocab] int32 UTF-8 bytes of each token (special tokens: 1, the document separator)."""
  from tokenizers import pre_tokenizers  # pylint: disable=g-import-not-at-top
  alphabet = set(pre_tokenizers.ByteLevel.alphabet())
  specials = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
  out = np.zeros(tok.get_vocab_size(with_added_tokens=True), np.int32)
  for token, i in tok.get_vocab(with_added_tokens=True).items():
    if token in specials:
      out[i] = 1
    elif all(c in alphabet for c in token):
      out[i] = len(token)           # byte-level: one alphabet character per byte
    else:
      raise ValueError(f"token {token!r} is not byte-level: bits per byte needs a byte-level "
                       "BPE (GPT-2's) tokenizer.")
  return out


def _documents_source(documents_dir: str, split: str):
  return tfds.builder_from_directory(documents_dir).as_data_source(split=split)


def _texts(source):
  for d in source:
    yield d["text"].decode("utf-8") if isinstance(d["text"], bytes) else d["text"]


def shared_tokenizer(cfg, data: LmData) -> str:
  """What process 0 of a multi-host run sends the others (hosts.prepare_once's name): its
  trained tokenizer.json, zlib-compressed and base64 (~0.5 MB for GPT-2's 50k tokens);
  "" when the tokenizer is the given config.vocab_path, which every host reads itself.

  Why not let each host train its own from the same documents: nothing in tokenizers
  promises the same BPE from one process to the next (its trainer assigns some token
  ids in hash-map order, which breaks ties between equally frequent pairs:
  huggingface/tokenizers#1794 and #2066 for WordPiece's "##" tokens; GPT's byte-level
  BPE trained twice here gave the same bytes), and hosts share no disk here (the
  streams live on local disk). One trained BPE, sent, rules disagreement out.
  """
  if cfg.vocab_path:
    return ""
  with open(data.tokenizer_path, "rb") as f:
    return base64.b64encode(zlib.compress(f.read())).decode("ascii")


def _tokenizer(cfg, data_dir: str, corpus_hash: str, documents_dir: str,
               shared: str = "") -> str:
  if cfg.vocab_path:
    path = os.path.expanduser(cfg.vocab_path)
    gpt2.load_gpt2_tokenizer(path)  # fail early, with a clear message
    where = paths.resolve(path)  # local or gs://
    if paths.is_remote(path) or (where.is_dir() and not (where / "tokenizer.json").exists()):
      # vocab.json + merges.txt, or files on gs://: store the assembled tokenizer.json
      # beside the streams (a local file, as the loader reads it).
      out = os.path.join(data_dir, "bpe-" + levels.content_hash([corpus_hash, path]),
                         "tokenizer.json")
      paths.write_atomically(out, gpt2.load_gpt2_tokenizer(path).to_str())
      return out
    return os.path.join(path, "tokenizer.json") if where.is_dir() else path
  path = os.path.join(data_dir, "bpe-" + levels.content_hash([corpus_hash, cfg.vocab_size]),
                      "tokenizer.json")
  with mirror.build_lock(os.path.dirname(path)):  # concurrent runs train it once
    if shared:  # process 0's (shared_tokenizer): written, never trained here
      content = zlib.decompress(base64.b64decode(shared))
      current = None
      if os.path.exists(path):
        with open(path, "rb") as f:
          current = f.read()
      if current != content:  # missing, or this host's own from before: replaced
        paths.write_atomically(path, content)
    elif not os.path.exists(path):
      tok = train_bpe(_texts(_documents_source(documents_dir, "train")), cfg.vocab_size)
      paths.write_atomically(path, tok.to_str())
  return path


# ---------------------------------------------------------------------------- prepare
def encode_documents(tok, texts, eot_id: int) -> tuple[np.ndarray, np.ndarray, int]:
  """(tokens [N] int32, starts [D] int64, UTF-8 bytes of the texts) of `<eot> doc` each."""
  chunks, starts, n, nbytes = [], [], 0, 0
  batch = []

  def flush():
    nonlocal n
    for enc in tok.encode_batch(batch, add_special_tokens=False):
      ids = np.asarray([eot_id] + enc.ids, np.int32)
      starts.append(n)
      chunks.append(ids)
      n += len(ids)
    batch.clear()

  for text in texts:
    nbytes += len(text.encode("utf-8"))
    batch.append(text)
    if len(batch) >= 256:
      flush()
  flush()
  tokens = np.concatenate(chunks) if chunks else np.zeros((0,), np.int32)
  return tokens, np.asarray(starts, np.int64), nbytes


def _write_streams(tok, documents_dir: str, root: str, tokenizer_path: str, eot_id: int):
  """tokens.npy + starts.npy per split, token_bytes.npy, and prepared.json written last."""
  done = os.path.join(root, "prepared.json")
  splits = [s for s in SPLITS if s in tfds.builder_from_directory(documents_dir).info.splits]
  stats = {}
  for split in splits:
    tokens, starts, nbytes = encode_documents(
        tok, _texts(_documents_source(documents_dir, split)), eot_id)
    os.makedirs(os.path.join(root, split), exist_ok=True)
    np.save(os.path.join(root, split, "tokens.npy"), tokens)
    np.save(os.path.join(root, split, "starts.npy"), starts)
    stats[split] = {"documents": len(starts), "tokens": len(tokens), "bytes": nbytes}
  np.save(os.path.join(root, "token_bytes.npy"), token_byte_lengths(tok))
  paths.write_atomically(done, json.dumps({"tokenizer": tokenizer_path, "stats": stats},
                                           indent=1))


def prepare(cfg, verbose: bool = True, beam=None, shared: str = "") -> LmData:
  """Builds (or reuses) documents, the BPE and the token streams of `cfg` (config.data);
  `beam` (a data.beam.util.BeamRun): the documents stage on that Beam runner; `shared`:
  process 0's shared_tokenizer, used instead of training one here."""
  from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
  levels.check_data_dir(cfg.data_dir)
  if beam:
    beam.check_data_dir(cfg.data_dir)
  data_dir = os.path.expanduser(cfg.data_dir)
  corpus_hash = levels.content_hash(levels.corpus_key(cfg))
  documents_dir, _, _ = prepare_lib.prepare_documents(
      cfg, os.path.join(data_dir, "documents-" + corpus_hash), beam)
  tokenizer_path = _tokenizer(cfg, data_dir, corpus_hash, documents_dir, shared)
  tok = Tokenizer.from_file(tokenizer_path)
  eot_id = tok.token_to_id(EOT)
  if eot_id is None:
    raise ValueError(f"{tokenizer_path} has no {EOT} token (the document separator).")
  with open(tokenizer_path, "rb") as f:
    tok_digest = levels.content_hash(f.read().decode("utf-8", "replace"))
  root = os.path.join(data_dir, "lm-" + levels.content_hash([_FORMAT, corpus_hash, tok_digest]))
  done = os.path.join(root, "prepared.json")
  with mirror.build_lock(root):  # concurrent runs write the streams once
    if not os.path.exists(done):
      _write_streams(tok, documents_dir, root, tokenizer_path, eot_id)
  with open(done) as f:
    stats = json.load(f)["stats"]
  data = LmData(streams_dir=root, tokenizer_path=tokenizer_path,
                vocab_size=tok.get_vocab_size(with_added_tokens=True), eot_id=eot_id,
                stats=stats)
  if verbose:
    print(f"[bert_jax.lm] {root}: tokenizer {tokenizer_path} ({data.vocab_size} tokens); "
          + "; ".join(f"{s}: {v['documents']} documents, {v['tokens']} tokens, "
                      f"{v['bytes']} bytes" for s, v in stats.items()))
  return data


# --------------------------------------------------------------------------- packing
def num_rows(num_tokens: int, seq_len: int, full_only: bool) -> int:
  """Rows of a stream: every target once; train keeps only full rows."""
  targets = max(num_tokens - 1, 0)
  return targets // seq_len if full_only else -(-targets // seq_len)


class RowMaker:
  """[B, 2] (epoch, row; row -1 = padding) -> a packed batch of the split's stream."""

  def __init__(self, tokens: np.ndarray, starts: np.ndarray, token_bytes: np.ndarray,
               seq_len: int, pad_id: int):
    self.tokens, self.starts, self.token_bytes = tokens, starts, token_bytes
    self.seq_len, self.pad_id = seq_len, pad_id

  def __call__(self, keys: np.ndarray) -> dict[str, np.ndarray]:
    rows = np.asarray(keys).reshape(-1, 2)[:, 1]
    n, length = len(self.tokens), self.seq_len
    idx = rows[:, None] * length + np.arange(length + 1)        # [B, L+1] stream offsets
    valid = (rows[:, None] >= 0) & (idx < n)
    safe = np.where(valid, idx, 0)
    stream = np.where(valid, np.asarray(self.tokens)[safe], self.pad_id).astype(np.int32)
    doc = np.searchsorted(self.starts, safe, side="right") - 1  # [B, L+1] document number
    inputs, targets = stream[:, :-1], stream[:, 1:]
    real_in = valid[:, :-1]
    weights = (real_in & valid[:, 1:]).astype(np.float32)       # [B, L]
    doc_in = doc[:, :-1]
    segment_ids = np.where(real_in, doc_in - doc_in[:, :1] + 1, 0).astype(np.int32)
    # Positions restart at the row start and at each document start within the row.
    row_start = idx[:, :1]
    doc_start = np.maximum(self.starts[np.maximum(doc_in, 0)], row_start)
    positions = np.where(real_in, idx[:, :-1] - doc_start, 0).astype(np.int32)
    return {"input_ids": inputs, "targets": targets, "weights": weights,
            "segment_ids": segment_ids, "positions": positions,
            "target_bytes": (self.token_bytes[targets] * weights).astype(np.float32)}


def train_iterator(cfg, data: LmData, batch_size: int, shard_index: int, shard_count: int,
                   seed: int, seq_len: int) -> grain.DatasetIterator:
  """Endless, checkpointable: a fresh global shuffle of the full rows every epoch."""
  tokens = data.tokens("train")
  n = num_rows(len(tokens), seq_len, full_only=True)
  if n < batch_size * shard_count:
    raise ValueError(f"the train stream ({len(tokens)} tokens) has {n} rows of {seq_len}: "
                     f"too few for one batch of {batch_size} on {shard_count} processes.")
  ds = grain.MapDataset.range(sys.maxsize)
  ds = ds.map(sampling.TrainKeys(n, batch_size, shard_index, shard_count, seed))
  ds = ds.map(RowMaker(tokens, data.starts("train"), data.token_bytes(), seq_len, data.eot_id))
  return loader.iterate(cfg, ds, None)


def eval_iterator(cfg, data: LmData, batch_size: int, shard_index: int, shard_count: int,
                  seq_len: int, split: str = "validation") -> grain.DatasetIterator:
  """Every held-out target once (the last row partly padding), in order."""
  if split not in data.stats:
    raise ValueError(f"No {split} documents in {data.streams_dir}: the corpus is too small "
                     "for its validation_fraction, or the fraction is 0.")
  tokens = data.tokens(split)
  indices = sampling.eval_shard_indices(num_rows(len(tokens), seq_len, full_only=False),
                                      batch_size, shard_index, shard_count)
  ds = grain.MapDataset.range(len(indices) // batch_size)
  ds = ds.map(sampling.EvalKeys(indices, batch_size))
  ds = ds.map(RowMaker(tokens, data.starts(split), data.token_bytes(), seq_len, data.eot_id))
  return loader.iterate(cfg, ds, None)
