"""Token classification (NER) featurization and mapping predictions back to words.

Words are split into sub-tokens (WordPiece, or byte-level BPE with each word's space as in
the running sentence); a word's tag goes on its FIRST sub-token and every other position
gets label -100 and weight 0, so that the loss and the metrics count each word exactly
once (the BERT paper's CoNLL-2003 setup). Sentences longer than `max_seq_length - 2`
tokens are truncated and counted in the SkipLog; the cut words get no prediction, and
`predictions_to_words` reports them as "O", so the entity metrics charge truncation as
missed entities instead of hiding it.

Feature dict (N = kept sentences, L = max_seq_length):
  input_ids     int32   [N, L]  [CLS] sub-tokens [SEP] [PAD]...
  input_mask    int32   [N, L]  1 on real tokens
  segment_ids   int32   [N, L]  all 0
  labels        int32   [N, L]  tag id on first sub-tokens, -100 (IGNORE_LABEL) elsewhere
  label_weights float32 [N, L]  1.0 where labels != -100, else 0.0
  word_ids      int32   [N, L]  index of the word a token belongs to, -1 on specials/pad
  num_words     int32   [N]     words in the original sentence (incl. truncated ones)
  example_index int32   [N]     position of the source example in the input sequence
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
import tokenizers

from bert_jax.tasks.finetune import tokens as tok_lib
from bert_jax.tasks.finetune.classification.features import make_label_map
from bert_jax.tasks.skiplog import SkipLog

IGNORE_LABEL = -100  # the ignore_index convention of HF / torch cross-entropy


@dataclasses.dataclass(frozen=True)
class NerExample:
  words: Sequence[str]
  tags: Optional[Sequence[str]] = None  # one per word; None: unlabeled
  guid: str = ""


def _word_pieces(encoding, num_words: int, unk: int) -> tuple[list[list[int]], int]:
  """Sub-token ids per word; a word the normalizer erases entirely becomes [UNK].

  Keeping every word at >= 1 token keeps tags and predictions aligned one-to-one with
  the input words (a zero-width char or control char alone would otherwise vanish).
  """
  pieces = [[] for _ in range(num_words)]
  for token_id, w in zip(encoding.ids, encoding.word_ids):
    if w is not None:
      pieces[w].append(token_id)
  empty = 0
  for p in pieces:
    if not p:
      p.append(unk)
      empty += 1
  return pieces, empty


def featurize_ner(
    examples: Sequence[NerExample],
    tokenizer: tokenizers.Tokenizer,
    max_seq_length: int,
    label_list: Sequence[str],
    allow_unlabeled: bool = False,
    source: str = "ner",
) -> tuple[dict[str, np.ndarray], SkipLog]:
  """Sub-token features with first-sub-token labels; see the module docstring.

  Args:
    examples: sentences as word lists with one tag per word.
    tokenizer: fast WordPiece tokenizer.
    max_seq_length: L including [CLS] and [SEP].
    label_list: the tag set in id order, e.g. ("O", "B-PER", "I-PER", ...).
    allow_unlabeled: keep sentences without tags (all labels -100) for prediction.
    source: name used in warnings and the summary.

  Returns:
    (features, SkipLog). Skip reasons: empty_text, missing_label, tags_length_mismatch,
    label_not_in_label_list. Notes: truncated (sentences), truncated_words (words),
    word_without_tokens (words replaced by [UNK]).
  """
  if max_seq_length < 3:
    raise ValueError(f"max_seq_length={max_seq_length} leaves no room for words.")
  mapping = make_label_map(label_list)
  special = tok_lib.special_ids(tokenizer)
  tokenizer = tok_lib.plain(tokenizer)
  log = SkipLog(source)

  usable, tag_ids = [], []
  for i, ex in enumerate(examples):
    where = ex.guid or i
    words = list(ex.words) if ex.words is not None else []
    if not words:
      log.skip("empty_text", where)
      continue
    if ex.tags is None:
      if not allow_unlabeled:
        log.skip("missing_label", where)
        continue
      ids = None
    else:
      if len(ex.tags) != len(words):
        log.skip("tags_length_mismatch", where, f"{len(words)} words, {len(ex.tags)} tags")
        continue
      ids = [mapping.get(t, mapping.get(str(t))) for t in ex.tags]
      if any(t is None for t in ids):
        bad = sorted({str(t) for t, k in zip(ex.tags, ids) if k is None})
        log.skip("label_not_in_label_list", where, f"tags {bad} not in {list(label_list)}")
        continue
    usable.append(i)
    tag_ids.append(ids)

  # Byte-level BPE (ModernBERT's) spells a word's leading space into its first token: the
  # words after the first get theirs, so they split as in the sentence " ".join(words).
  spaced = isinstance(tokenizer.pre_tokenizer, tokenizers.pre_tokenizers.ByteLevel)
  encodings = tokenizer.encode_batch(
      [[" " + str(w) if spaced and j else str(w) for j, w in enumerate(examples[i].words)]
       for i in usable], is_pretokenized=True, add_special_tokens=False)

  budget = max_seq_length - 2
  rows_ids, rows_labels, rows_words, num_words = [], [], [], []
  for i, ids, enc in zip(usable, tag_ids, encodings):
    where = examples[i].guid or i
    n = len(examples[i].words)
    pieces, empty = _word_pieces(enc, n, special.unk)
    if empty:
      log.note("word_without_tokens", where, f"{empty} word(s) -> [UNK]", count=empty)
    row_ids, row_labels, row_words = [special.cls], [IGNORE_LABEL], [-1]
    for w, p in enumerate(pieces):
      room = budget - (len(row_ids) - 1)
      if room <= 0:
        log.note("truncated", where, f"{n - w} of {n} words cut")
        log.notes["truncated_words"] += n - w
        break
      p = p[:room]  # a word cut mid-way keeps its first sub-token, hence its label
      row_ids += p
      row_labels += [IGNORE_LABEL if ids is None else ids[w]] + [IGNORE_LABEL] * (len(p) - 1)
      row_words += [w] * len(p)
    row_ids.append(special.sep)
    row_labels.append(IGNORE_LABEL)
    row_words.append(-1)
    rows_ids.append(row_ids)
    rows_labels.append(row_labels)
    rows_words.append(row_words)
    num_words.append(n)

  log.kept = len(usable)
  labels = tok_lib.pad_rows(rows_labels, max_seq_length, IGNORE_LABEL)
  features = {
      "input_ids": tok_lib.pad_rows(rows_ids, max_seq_length, special.pad),
      "input_mask": tok_lib.pad_rows([[1] * len(r) for r in rows_ids], max_seq_length),
      "segment_ids": np.zeros((len(usable), max_seq_length), dtype=np.int32),
      "labels": labels,
      "label_weights": (labels != IGNORE_LABEL).astype(np.float32),
      "word_ids": tok_lib.pad_rows(rows_words, max_seq_length, -1),
      "num_words": np.asarray(num_words, dtype=np.int32),
      "example_index": np.asarray(usable, dtype=np.int32),
  }
  return features, log


def predictions_to_words(pred_ids, word_ids, label_list: Sequence[str],
                         num_words=None, outside: str = "O"):
  """Per-token predicted ids -> one tag per word (the first sub-token's prediction).

  Args:
    pred_ids: [L] or [N, L] predicted tag ids (argmax of the token logits).
    word_ids: same shape, the `word_ids` feature (-1 on specials/padding).
    label_list: the tag set in id order.
    num_words: int or [N]: words in each original sentence (the `num_words` feature).
      Words with no token in the features (cut by truncation) get `outside`. Without
      it, sentences end at their last featurized word.
    outside: tag for words that were never seen by the model.

  Returns:
    list[str] for a single [L] input, else list[list[str]] of length N.
  """
  pred_ids, word_ids = np.asarray(pred_ids), np.asarray(word_ids)
  if pred_ids.shape != word_ids.shape:
    raise ValueError(f"pred_ids {pred_ids.shape} and word_ids {word_ids.shape} differ.")
  single = pred_ids.ndim == 1
  pred_ids, word_ids = np.atleast_2d(pred_ids), np.atleast_2d(word_ids)
  if num_words is None:
    num_words = word_ids.max(axis=1) + 1
  num_words = np.broadcast_to(np.asarray(num_words), (pred_ids.shape[0],))
  out = []
  for preds, words, n in zip(pred_ids, word_ids, num_words):
    tags = [outside] * int(n)
    seen = set()
    for p, w in zip(preds, words):
      if w >= 0 and w not in seen:  # first sub-token of word w
        seen.add(w)
        tags[w] = label_list[int(p)]
    out.append(tags)
  return out[0] if single else out
