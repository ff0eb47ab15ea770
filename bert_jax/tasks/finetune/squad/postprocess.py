"""SQuAD post-processing: best span per example from start/end logits of all windows.

run_squad's `write_predictions`: for every window take the `n_best_size` best start
and end positions, keep pairs with start <= end, both on context tokens, at most
`max_answer_length` tokens, start at a token whose max-context window this is; score
= start_logit + end_logit; best over all windows. For v2.0 the null score is the
smallest [CLS] score (start[0] + end[0]) over the windows, and "" is predicted when
null_score - best_span_score > `null_score_diff_threshold`.

The answer text is `context[offsets[start][0]:offsets[end][1]]`: the exact original
characters, not detokenized WordPieces (accents, case and spacing survive).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Mapping, Sequence

import numpy as np

from bert_jax.tasks.finetune.squad.features import SquadExample


@dataclasses.dataclass
class SquadPredictions:
  """texts: qid -> answer ("" = no answer / no valid span);
  nbest: qid -> list of {"text", "start_logit", "end_logit", "score", "probability",
    "char_start", "char_end"} best first (char_* = -1 for the null answer);
  null_score_diff: qid -> null score - best span score (v2 only; +inf if no span)."""
  texts: dict
  nbest: dict
  null_score_diff: dict


def _top(logits: np.ndarray, n: int) -> np.ndarray:
  return np.argsort(-logits, kind="stable")[:n]


def postprocess_squad(
    examples: Sequence[SquadExample],
    features: Mapping[str, np.ndarray],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> SquadPredictions:
  """Best answer text per example (see the module docstring).

  Args:
    examples: the sequence that was passed to `featurize_squad`.
    features: its output (`offsets`, `token_is_max_context`, `example_index` used).
    start_logits, end_logits: [F, L] model outputs for those features, in order.
    n_best_size: candidate starts/ends per window, and length of the n-best lists.
    max_answer_length: longest answer in tokens.
    version_2: allow the null answer (SQuAD 2.0).
    null_score_diff_threshold: predict "" when null - best span score exceeds this.

  Returns:
    SquadPredictions. Examples without any feature get no entry (the metrics count
    them as missing). With no valid span, v1 predicts "" (run_squad writes "empty").
  """
  start_logits = np.asarray(start_logits, dtype=np.float64)
  end_logits = np.asarray(end_logits, dtype=np.float64)
  offsets = features["offsets"]  # [F, L, 2]
  if start_logits.shape != offsets.shape[:2] or end_logits.shape != offsets.shape[:2]:
    raise ValueError(f"Logits {start_logits.shape}/{end_logits.shape} do not match the "
                     f"features {offsets.shape[:2]}.")
  by_example = collections.defaultdict(list)
  for f, e in enumerate(features["example_index"]):
    by_example[int(e)].append(f)

  texts, nbest, null_diff = {}, {}, {}
  for e, feats in by_example.items():
    ex = examples[e]
    candidates = []  # (score, start_logit, end_logit, char_start, char_end)
    null = (np.inf, 0.0, 0.0)  # (score, start_logit, end_logit), min over windows
    for f in feats:
      s_log, e_log = start_logits[f], end_logits[f]
      is_context = offsets[f, :, 0] >= 0  # [L]
      max_ctx = features["token_is_max_context"][f]  # [L]
      if version_2 and s_log[0] + e_log[0] < null[0]:
        null = (float(s_log[0] + e_log[0]), float(s_log[0]), float(e_log[0]))
      for s in _top(s_log, n_best_size):
        if not (is_context[s] and max_ctx[s]):
          continue
        for t in _top(e_log, n_best_size):
          if not is_context[t] or t < s or t - s + 1 > max_answer_length:
            continue
          candidates.append((float(s_log[s] + e_log[t]), float(s_log[s]), float(e_log[t]),
                             int(offsets[f, s, 0]), int(offsets[f, t, 1])))
    candidates.sort(key=lambda c: -c[0])

    entries, seen = [], set()
    for score, sl, el, c0, c1 in candidates:
      text = ex.context[c0:c1]
      if text in seen:  # the same text from another window or token split
        continue
      seen.add(text)
      entries.append({"text": text, "start_logit": sl, "end_logit": el, "score": score,
                      "char_start": c0, "char_end": c1})
      if len(entries) == n_best_size:
        break
    best_span = entries[0] if entries else None
    if version_2 and "" not in seen:
      entries.append({"text": "", "start_logit": null[1], "end_logit": null[2],
                      "score": null[0], "char_start": -1, "char_end": -1})
      entries.sort(key=lambda c: -c["score"])
    if entries:
      scores = np.array([c["score"] for c in entries])
      probs = np.exp(scores - scores.max())
      for c, p in zip(entries, probs / probs.sum()):
        c["probability"] = float(p)

    if version_2:
      diff = null[0] - best_span["score"] if best_span else np.inf
      null_diff[ex.qid] = float(diff)
      texts[ex.qid] = "" if diff > null_score_diff_threshold else best_span["text"]
    else:
      texts[ex.qid] = best_span["text"] if best_span else ""
    nbest[ex.qid] = entries
  return SquadPredictions(texts=texts, nbest=nbest, null_score_diff=null_diff)
