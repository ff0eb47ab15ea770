"""Span QA (SQuAD v1.1/v2.0) featurization: question + sliding context windows.

Each example becomes one feature per window of the context:

    [CLS] q_1 .. q_k [SEP] c_s .. c_{s+n-1} [SEP] [PAD]..     segments 0..0 1..1 0..

with the question cut to `max_query_length` tokens and windows of n <= L - k - 3
context tokens starting every `doc_stride` tokens (run_squad's DocSpans), so every
context token is in at least one window. The char<->token map comes from the fast
tokenizer's offsets on the context alone, so a predicted span maps back to the exact
original characters (accents, extra spaces and case included): see postprocess.py.

Feature dict (F = features, L = max_seq_length):
  input_ids      int32 [F, L]
  input_mask     int32 [F, L]
  segment_ids    int32 [F, L]     0 for [CLS] question [SEP], 1 for context [SEP]
  offsets        int32 [F, L, 2]  [start, end) chars in the context of each context
                                  token; (-1, -1) on [CLS], question, [SEP], padding
  token_is_max_context bool [F, L]  this window gives the token its most context
                                  (run_squad's rule for tokens seen in 2+ windows)
  example_index  int32 [F]        position of the example in the input sequence
  start_positions, end_positions int32 [F]  (is_training only) token positions of the
                                  answer in the window; 0 ([CLS]) when the window does
                                  not contain the whole answer or there is none (v2)
"""
from __future__ import annotations

import bisect
import dataclasses
from typing import NamedTuple, Sequence

import numpy as np
import tokenizers

from bert_jax.tasks.finetune import tokens as tok_lib
from bert_jax.tasks.skiplog import SkipLog


class Answer(NamedTuple):
  text: str
  start: int  # char offset of text in the context


@dataclasses.dataclass(frozen=True)
class SquadExample:
  qid: str
  question: str
  context: str
  answers: tuple[Answer, ...] = ()  # gold answers; the first aligned one is trained on
  is_impossible: bool = False  # v2.0 unanswerable question
  title: str = ""


def answer_matches(context: str, answer: Answer) -> bool:
  """True iff the answer text is exactly the context at answer.start (and non-blank)."""
  start, text = answer.start, answer.text
  return (bool(text.strip()) and 0 <= start <= len(context) - len(text)
          and context[start:start + len(text)] == text)


def train_answer(example: SquadExample):
  """The first gold answer found verbatim at its answer_start, or None."""
  return next((a for a in example.answers if answer_matches(example.context, a)), None)


def doc_spans(num_tokens: int, window: int, stride: int) -> list[tuple[int, int]]:
  """(start, length) windows over num_tokens tokens, run_squad's loop.

  The next window starts min(length, stride) after the previous one, so windows
  overlap or touch and never leave a gap, whatever the stride.
  """
  spans, start = [], 0
  while start < num_tokens:
    length = min(num_tokens - start, window)
    spans.append((start, length))
    if start + length == num_tokens:
      break
    start += min(length, stride)
  return spans


def _max_context(spans, num_tokens: int) -> np.ndarray:
  """[num_tokens] index of the span where each token has the most context.

  Score = min(left, right context) + 0.01 * span length; the first span wins ties.
  """
  pos = np.arange(num_tokens)
  scores = np.full((len(spans), num_tokens), -np.inf)  # [spans, tokens]
  for i, (start, length) in enumerate(spans):
    inside = (pos >= start) & (pos < start + length)
    score = np.minimum(pos - start, start + length - 1 - pos) + 0.01 * length
    scores[i] = np.where(inside, score, -np.inf)
  return np.argmax(scores, axis=0)


def char_to_token_span(offsets, char_start: int, char_end: int):
  """Inclusive token span covering chars [char_start, char_end), or None if none does."""
  ends = [e for _, e in offsets]
  starts = [s for s, _ in offsets]
  first = bisect.bisect_right(ends, char_start)  # first token ending after char_start
  last = bisect.bisect_left(starts, char_end) - 1  # last token starting before char_end
  return (first, last) if first <= last else None


def featurize_squad(
    examples: Sequence[SquadExample],
    tokenizer: tokenizers.Tokenizer,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    is_training: bool = False,
    source: str = "squad",
) -> tuple[dict[str, np.ndarray], SkipLog]:
  """Windows, offsets and (for training) answer positions; see the module docstring.

  Returns:
    (features, SkipLog). Skip reasons: empty_text, no_tokens, question_too_long, and
    in training only: missing_label (answerable without answers), answer_text_mismatch
    (no answer text is found at its answer_start), answer_longer_than_window and
    answer_split_across_windows (no window holds the whole answer, so every window
    would teach "no answer"; the second only happens when doc_stride leaves too
    little overlap). Notes: question_truncated, multi_window.
  """
  if doc_stride <= 0 or max_query_length <= 0 or max_seq_length < 5:
    raise ValueError(f"Need doc_stride ({doc_stride}) > 0, max_query_length "
                     f"({max_query_length}) > 0 and max_seq_length ({max_seq_length}) >= 5.")
  special = tok_lib.special_ids(tokenizer)
  tokenizer = tok_lib.plain(tokenizer)
  log = SkipLog(source)

  usable = []
  for i, ex in enumerate(examples):
    if not ex.question.strip() or not ex.context.strip():
      log.skip("empty_text", ex.qid or i, "empty question or context")
    elif is_training and not ex.is_impossible and not ex.answers:
      log.skip("missing_label", ex.qid or i, "answerable question without answers")
    elif is_training and not ex.is_impossible and train_answer(ex) is None:
      a = ex.answers[0]
      found = ex.context[max(a.start, 0):max(a.start, 0) + len(a.text)]
      log.skip("answer_text_mismatch", ex.qid or i,
               f"answer {a.text!r} at {a.start}, context there has {found!r}")
    else:
      usable.append(i)
  q_enc = tokenizer.encode_batch([examples[i].question for i in usable], add_special_tokens=False)
  c_enc = tokenizer.encode_batch([examples[i].context for i in usable], add_special_tokens=False)

  rows = {k: [] for k in ("input_ids", "segment_ids", "offsets", "max_ctx", "index",
                          "start", "end")}
  kept = 0
  for i, qe, ce in zip(usable, q_enc, c_enc):
    ex = examples[i]
    q_ids, c_ids, c_off = list(qe.ids), list(ce.ids), list(ce.offsets)
    if not q_ids or not c_ids:
      log.skip("no_tokens", ex.qid or i, "question or context has no tokens")
      continue
    if len(q_ids) > max_query_length:
      log.note("question_truncated", ex.qid or i)
      q_ids = q_ids[:max_query_length]
    answer_span = None
    if is_training and not ex.is_impossible:
      a = train_answer(ex)
      answer_span = char_to_token_span(c_off, a.start, a.start + len(a.text))
      if answer_span is None:  # the normalizer dropped every char of the answer
        log.skip("answer_text_mismatch", ex.qid or i, "no token covers the answer")
        continue
    window = max_seq_length - len(q_ids) - 3
    if window <= 0:  # only when max_query_length >= max_seq_length - 3
      log.skip("question_too_long", ex.qid or i, f"{len(q_ids)} question tokens leave "
               f"no room for context in {max_seq_length}")
      continue
    spans = doc_spans(len(c_ids), window, doc_stride)
    if answer_span is not None and not any(
        st <= answer_span[0] and answer_span[1] < st + n for st, n in spans):
      # Every window would be labeled "no answer" ([CLS]): a wrong label, so skip.
      n_ans = answer_span[1] - answer_span[0] + 1
      reason = ("answer_longer_than_window" if n_ans > window
                else "answer_split_across_windows")
      log.skip(reason, ex.qid or i, f"answer has {n_ans} tokens, window {window}, "
               f"stride {doc_stride}")
      continue
    if len(spans) > 1:
      log.note("multi_window", ex.qid or i, f"{len(spans)} windows")
    best_span = _max_context(spans, len(c_ids))
    prefix = len(q_ids) + 2  # [CLS] question [SEP]
    for s_idx, (start, length) in enumerate(spans):
      rows["input_ids"].append([special.cls] + q_ids + [special.sep]
                               + c_ids[start:start + length] + [special.sep])
      rows["segment_ids"].append([0] * prefix + [1] * (length + 1))
      offsets = np.full((max_seq_length, 2), -1, dtype=np.int32)
      offsets[prefix:prefix + length] = c_off[start:start + length]
      rows["offsets"].append(offsets)
      max_ctx = np.zeros(max_seq_length, dtype=bool)
      max_ctx[prefix:prefix + length] = best_span[start:start + length] == s_idx
      rows["max_ctx"].append(max_ctx)
      rows["index"].append(i)
      if answer_span is not None and start <= answer_span[0] and answer_span[1] < start + length:
        rows["start"].append(answer_span[0] - start + prefix)
        rows["end"].append(answer_span[1] - start + prefix)
      else:  # v2 no-answer, or the answer is (partly) outside this window
        rows["start"].append(0)
        rows["end"].append(0)
    kept += 1

  log.kept = kept
  num = len(rows["index"])
  features = {
      "input_ids": tok_lib.pad_rows(rows["input_ids"], max_seq_length, special.pad),
      "input_mask": tok_lib.pad_rows([[1] * len(r) for r in rows["input_ids"]], max_seq_length),
      "segment_ids": tok_lib.pad_rows(rows["segment_ids"], max_seq_length),
      "offsets": (np.stack(rows["offsets"]) if num
                  else np.zeros((0, max_seq_length, 2), np.int32)),
      "token_is_max_context": (np.stack(rows["max_ctx"]) if num
                               else np.zeros((0, max_seq_length), bool)),
      "example_index": np.asarray(rows["index"], dtype=np.int32),
  }
  if is_training:
    features["start_positions"] = np.asarray(rows["start"], dtype=np.int32)
    features["end_positions"] = np.asarray(rows["end"], dtype=np.int32)
  return features, log
