"""Corpus BLEU and chrF with sacreBLEU on detokenized text, plus exact sentence match.

sacreBLEU tokenizes itself (13a by default), so it must see detokenized text: scores of
pre-tokenized text are not comparable across papers (Post 2018). Its signature (the
tokenizer, smoothing, version, ...) is returned with the scores so every log says what
was computed.
"""
from __future__ import annotations

from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
  """{"bleu", "chrf", "exact_match"} (0..100, 0..100, 0..1) and the "signature" string."""
  if len(hypotheses) != len(references):
    raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references.")
  bleu, chrf = BLEU(), CHRF()
  hyps, refs = list(hypotheses), [list(references)]
  b = bleu.corpus_score(hyps, refs)
  c = chrf.corpus_score(hyps, refs)
  exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references))
  return {"bleu": float(b.score), "chrf": float(c.score),
          "exact_match": exact / max(len(references), 1),
          "signature": f"BLEU {bleu.get_signature()} | chrF {chrf.get_signature()}"}
