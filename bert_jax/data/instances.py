"""Pretraining examples: NSP instances and packed MLM rows, built offline (prepare.py).

Offline, per shard of tokenized documents (each document a list of non-empty sentences,
each sentence an int array of token ids), two layouts, both stored UNMASKED:

* NSP (google-research/bert create_pretraining_data.py, but with a fair label coin, see
  create_nsp_instances): `[CLS] A [SEP] B [SEP]`, segment ids 0 for `[CLS] A [SEP]` and
  1 for `B [SEP]`, `is_random_next` 1 when B comes from another document.
* Packed MLM (RoBERTa FULL-SENTENCES, or DOC-SENTENCES when packing stops at document
  ends): `[CLS] d1 ... [SEP] d2 ... [SEP]`, whole sentences in corpus order. Segment ids
  number the document fragments of the row from 1 ([CLS] and each closing [SEP] belong to
  their fragment); the loader pads with 0. So `segment_ids` here are NOT token types:
  attention is allowed iff `seg[q] == seg[k] and seg[q] > 0` (block-diagonal, the flax/t5x
  "segmentation" convention), and the model should use token type 0 everywhere.

Masking is online, per batch: masking.py.
"""
from __future__ import annotations

import collections
import dataclasses
import os
from typing import Optional, Sequence

import numpy as np

from bert_jax.data.sampling import CumulativeSampler

Document = Sequence[np.ndarray]  # sentences, each [n] int token ids, n >= 1


@dataclasses.dataclass
class Instance:
  input_ids: np.ndarray  # [n] int32, n <= max_seq_length, unpadded
  segment_ids: np.ndarray  # [n] int32
  is_random_next: int = 0


# ----------------------------------------------------------------------------- NSP
def _truncate_seq_pair(a: np.ndarray, b: np.ndarray, max_num_tokens: int,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """google-research/bert truncate_seq_pair: pop one token at a time from the longer
  (B on ties), from its front or back with probability 1/2 each."""
  la, lb = len(a), len(b)
  pops_a = pops_b = 0
  while la + lb > max_num_tokens:
    if la > lb:
      la, pops_a = la - 1, pops_a + 1
    else:
      lb, pops_b = lb - 1, pops_b + 1
  # The front/back choices of n pops only matter through their sum: Binomial(n, 1/2).
  fa = int(rng.binomial(pops_a, 0.5)) if pops_a else 0
  fb = int(rng.binomial(pops_b, 0.5)) if pops_b else 0
  return a[fa:len(a) - (pops_a - fa)], b[fb:len(b) - (pops_b - fb)]


def create_nsp_instances(documents: Sequence[Document], doc_index: int, max_seq_length: int,
                         short_seq_prob: float, cls_id: int, sep_id: int,
                         rng: np.random.Generator,
                         doc_sampler: Optional[CumulativeSampler] = None) -> list[Instance]:
  """NSP instances of `documents[doc_index]`, create_instances_from_document semantics.

  The target length is drawn once per document: max_seq_length - 3, or with
  probability `short_seq_prob` uniform in [2, max_seq_length - 3]. Sentences fill a chunk
  up to it; A is a random number of the chunk's leading sentences; B is the rest of the
  chunk, or half the time a span from a random start of another document, the chunk's
  unused sentences then being put back (i -= num_unused_segments).

  One deliberate difference: google forces a random B whenever the chunk is a single
  sentence, which makes ~55% of its pairs random on ordinary text. Here the label is a
  fair coin drawn first; an actual-next single-sentence chunk takes the document's next
  sentence as B, or, for a lone last sentence, is cut at a random token (B still follows
  A in the source). Only one-token lone sentences still force a random B.

  Args:
    documents: the pool the random B document comes from (one preparation shard).
    doc_sampler: CumulativeSampler over `documents` (uniform weights in google's code);
      None builds one. A pool of one document draws B from itself (google's 10-try loop
      ends the same way).
  """
  document = documents[doc_index]
  max_num_tokens = max_seq_length - 3
  target_seq_length = max_num_tokens
  if rng.random() < short_seq_prob:
    target_seq_length = int(rng.integers(2, max_num_tokens + 1))
  if doc_sampler is None and len(documents) > 1:
    doc_sampler = CumulativeSampler(np.ones(len(documents)))

  instances = []
  chunk, chunk_len, i = [], 0, 0
  while i < len(document):
    chunk.append(document[i])
    chunk_len += len(document[i])
    if i == len(document) - 1 or chunk_len >= target_seq_length:
      is_random_next = int(rng.random() < 0.5)
      if not is_random_next and len(chunk) == 1 and i + 1 < len(document):
        i += 1  # B must be the real next sentence: take it into the chunk
        chunk.append(document[i])
      if not is_random_next and len(chunk) == 1:  # a lone last sentence
        if len(chunk[0]) >= 2:
          cut = int(rng.integers(1, len(chunk[0])))
          tokens_a, tokens_b = chunk[0][:cut], chunk[0][cut:]
        else:
          is_random_next = 1
      if len(chunk) >= 2 or is_random_next:
        a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
        tokens_a = np.concatenate(chunk[:a_end])
      if is_random_next:
        target_b_length = target_seq_length - len(tokens_a)
        other = doc_index
        if len(documents) > 1:
          other = int(doc_sampler.sample(rng, exclude=doc_index))
        random_document = documents[other]
        start = int(rng.integers(0, len(random_document)))
        pieces, b_len = [], 0
        for sentence in random_document[start:]:
          pieces.append(sentence)
          b_len += len(sentence)
          if b_len >= target_b_length:
            break
        tokens_b = np.concatenate(pieces)
        i -= len(chunk) - a_end  # the unused sentences go back to the document
      elif len(chunk) >= 2:
        tokens_b = np.concatenate(chunk[a_end:])
      tokens_a, tokens_b = _truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
      na, nb = len(tokens_a), len(tokens_b)
      ids = np.empty(na + nb + 3, np.int32)  # [CLS] A [SEP] B [SEP]
      ids[0], ids[na + 1], ids[-1] = cls_id, sep_id, sep_id
      ids[1:na + 1], ids[na + 2:-1] = tokens_a, tokens_b
      segment_ids = np.zeros_like(ids)
      segment_ids[na + 2:] = 1
      instances.append(Instance(ids, segment_ids, is_random_next))
      chunk, chunk_len = [], 0
    i += 1
  return instances


# --------------------------------------------------------------------------- packing
def create_packed_rows(documents: Sequence[Document], max_seq_length: int, cls_id: int,
                       sep_id: int, across_documents: bool = True) -> list[Instance]:
  """Packs whole sentences in order into rows of at most max_seq_length tokens.

  across_documents=True is FULL-SENTENCES (a row may hold the end of one document and
  the start of the next), False is DOC-SENTENCES (a row never crosses a document end).
  A sentence that alone overflows an empty row is cut into row-sized pieces rather than
  dropped. Layout and segment ids: see the module docstring.
  """
  rows = []
  ids: list[np.ndarray] = []
  segs: list[np.ndarray] = []
  state = {"used": 1, "frag": 1, "open": False}  # used counts [CLS]

  def close_fragment():
    if state["open"]:
      ids.append(np.array([sep_id], np.int32))
      segs.append(np.array([state["frag"]], np.int32))
      state["frag"] += 1
      state["open"] = False

  def flush():
    close_fragment()
    if ids:
      row = np.concatenate([np.array([cls_id], np.int32)] + ids)
      seg = np.concatenate([np.array([1], np.int32)] + segs)
      rows.append(Instance(row, seg, 0))
    ids.clear()
    segs.clear()
    state.update(used=1, frag=1, open=False)

  capacity = max_seq_length - 2  # room for sentence tokens next to [CLS] and one [SEP]
  for document in documents:
    for sentence in document:
      for start in range(0, len(sentence), capacity):
        piece = np.asarray(sentence[start:start + capacity], np.int32)
        cost = len(piece) + (0 if state["open"] else 1)  # a new fragment needs its [SEP]
        if state["used"] + cost > max_seq_length:
          flush()
          cost = len(piece) + 1
        ids.append(piece)
        segs.append(np.full(len(piece), state["frag"], np.int32))
        state["used"] += cost
        state["open"] = True
    close_fragment()
    if not across_documents:
      flush()
  flush()
  return rows


# ------------------------------------------------------- preparation worker (one shard)
@dataclasses.dataclass(frozen=True)
class InstanceSettings:
  mode: str  # "nsp" | "mlm_packed"
  max_seq_length: int
  short_seq_prob: float
  dupe_factor: int
  pack_across_documents: bool
  seed: int


@dataclasses.dataclass
class ShardInstances:
  """One shard's instances, flat (cheap to pickle back from a worker process)."""
  shard_index: int
  input_ids: np.ndarray  # [total] int32, all instances concatenated
  segment_ids: np.ndarray  # [total] int32
  lengths: np.ndarray  # [num_instances] int64
  is_random_next: np.ndarray  # [num_instances] int32
  unigram_counts: Optional[np.ndarray]  # [vocab] int64 over the shard's documents
  stats: dict


_WORKER = {}


def init_worker(tokenizer_json: str, settings: InstanceSettings, threads: bool) -> None:
  """Pool initializer: one tokenizer per process (a Tokenizer does not pickle)."""
  if not threads:  # processes already fill the cores; Rust threads would oversubscribe
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
  from tokenizers import Tokenizer  # pylint: disable=g-import-not-at-top
  tok = Tokenizer.from_str(tokenizer_json)
  tok.encode_special_tokens = True  # "[SEP]" written in the corpus is text, not a separator
  _WORKER.update(tokenizer=tok, settings=settings, vocab_size=tok.get_vocab_size(True),
                 cls=tok.token_to_id("[CLS]"), sep=tok.token_to_id("[SEP]"))


def shard_instances(task: tuple[int, int, list[str]]) -> ShardInstances:
  """Tokenizes one shard of documents and creates its instances, dupe_factor times.

  Args:
    task: (split_id, shard_index, documents as newline-joined sentences). The random
      stream is seeded by (seed, split_id, shard_index, dupe), so the output does not
      depend on how many processes run the shards.
  """
  split_id, shard_index, texts = task
  tok, st = _WORKER["tokenizer"], _WORKER["settings"]
  stats = collections.Counter()
  sentences = [text.split("\n") for text in texts]
  encodings = tok.encode_batch_fast([s for doc in sentences for s in doc],
                                    add_special_tokens=False)
  docs, k = [], 0
  for doc in sentences:
    ids = [np.asarray(e.ids, np.int32) for e in encodings[k:k + len(doc)]]
    k += len(doc)
    ids = [x for x in ids if len(x)]  # a sentence of control characters tokenizes to nothing
    if ids:
      docs.append(ids)
    else:
      stats["documents_empty_after_tokenization"] += 1
  all_ids = np.concatenate([x for d in docs for x in d]) if docs else np.zeros(0, np.int32)
  stats["tokens"] += len(all_ids)
  stats["documents"] += len(docs)
  counts = np.bincount(all_ids, minlength=_WORKER["vocab_size"]) if split_id == 0 else None

  instances = []
  for dupe in range(st.dupe_factor):
    rng = np.random.default_rng([st.seed, split_id, shard_index, dupe])
    if st.mode == "nsp":
      sampler = CumulativeSampler(np.ones(len(docs))) if len(docs) > 1 else None
      for i in range(len(docs)):
        instances += create_nsp_instances(docs, i, st.max_seq_length, st.short_seq_prob,
                                          _WORKER["cls"], _WORKER["sep"], rng, sampler)
    else:  # a fresh document order per dupe gives FULL-SENTENCES rows new boundaries
      order = rng.permutation(len(docs)) if dupe else np.arange(len(docs))
      instances += create_packed_rows([docs[i] for i in order], st.max_seq_length,
                                      _WORKER["cls"], _WORKER["sep"], st.pack_across_documents)
  cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int32)
  return ShardInstances(
      shard_index=shard_index,
      input_ids=cat([x.input_ids for x in instances]),
      segment_ids=cat([x.segment_ids for x in instances]),
      lengths=np.array([len(x.input_ids) for x in instances], np.int64),
      is_random_next=np.array([x.is_random_next for x in instances], np.int32),
      unigram_counts=counts, stats=dict(stats))
