"""MLM masking, online: `Masker` masks a whole batch at once in numpy (data/loader.py).

Its random bits come from a counter-based hash of (seed, epoch, example index,
position), not from a stateful generator: a sequence gets the same mask at the same
epoch whichever worker, batch or resumed run handles it, and a new mask every epoch.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from bert_jax.data.sampling import CumulativeSampler, example_keys, uniforms


def check_rates(data_cfg) -> None:
  """ValueError (one line, naming the field) for a masking rate outside its range: a rate
  outside masks nothing sensible (round(n * rate) tokens of n). data_cfg: config.data
  (a field it lacks is not checked: a config that never masks need not carry one)."""
  rate = data_cfg.get("masked_lm_prob")
  if rate is not None and not 0 < rate <= 1:
    raise ValueError(f"data.masked_lm_prob={rate} must be in (0, 1] (the fraction of a "
                     "sequence's tokens to mask).")
  eval_rate = data_cfg.get("eval_masked_lm_prob")
  if eval_rate is not None and not 0 <= eval_rate <= 1:
    raise ValueError(f"data.eval_masked_lm_prob={eval_rate} must be in [0, 1] (0: the "
                     "validation masks follow data.masked_lm_prob).")
  split = {k: data_cfg.get(k) for k in ("mask_token_prob", "random_token_prob")}
  for key, p in split.items():
    if p is not None and not 0 <= p <= 1:
      raise ValueError(f"data.{key}={p} must be in [0, 1] (of the masked slots).")
  if None not in split.values() and sum(split.values()) > 1 + 1e-9:  # (float sums)
    raise ValueError(f"data.mask_token_prob={split['mask_token_prob']} + data."
                     f"random_token_prob={split['random_token_prob']} must be <= 1 (the rest "
                     "of the masked slots keep their token).")


class Masker:
  """Dynamic BERT masking of a padded batch, vectorized over the batch.

  Per sequence, from the n real tokens (not padding nor a special/[unused] token)
  `k = min(max_predictions, max(1, round(n * masked_lm_prob)))` are chosen; each becomes
  [MASK] with probability mask_token_prob (BERT's 0.8), a random token with
  random_token_prob (0.1; drawn by the CumulativeSampler over `replacement_weights`, e.g.
  corpus unigram counts, never a special token) and stays with the rest. Whole-word
  masking picks words in random order while their pieces fit in k (it stops at the first
  word that does not fit, where google's loop would try smaller later words, so it can
  mask a few tokens less than k).
  """

  def __init__(self, *, special_ids: Sequence[int], vocab_size: int, mask_id: int,
               max_predictions: int, masked_lm_prob: float = 0.15,
               replacement_weights: Optional[np.ndarray] = None,
               whole_word_mask: bool = False, continuation: Optional[np.ndarray] = None,
               seed: int = 0, mask_token_prob: float = 0.8, random_token_prob: float = 0.1):
    """Args:
      special_ids: ids never chosen nor drawn (padding included).
      replacement_weights: [vocab_size] weights of random replacement tokens; None is
        uniform over the non-special vocabulary.
      continuation: [vocab_size] bool, True for `##` pieces (needed by whole_word_mask).
    """
    self._special = np.zeros(vocab_size, bool)  # [V]
    self._special[np.asarray(list(special_ids), np.int64)] = True
    self.mask_id = mask_id
    self.max_predictions = max_predictions
    self.masked_lm_prob = masked_lm_prob
    self.mask_token_prob, self.random_token_prob = mask_token_prob, random_token_prob
    self.seed = seed
    self.whole_word_mask = whole_word_mask
    if whole_word_mask and continuation is None:
      raise ValueError("whole_word_mask needs the `continuation` table of ## pieces.")
    self._continuation = continuation
    weights = np.ones(vocab_size) if replacement_weights is None else replacement_weights
    self.sampler = CumulativeSampler(weights, exclude_ids=np.flatnonzero(self._special))

  def candidates(self, input_ids: np.ndarray) -> np.ndarray:
    """[B, L] bool: real tokens that may be chosen."""
    return ~self._special[input_ids]

  def num_to_predict(self, cand: np.ndarray) -> np.ndarray:
    """[B] number of tokens to mask, from the [B, L] candidates."""
    n = cand.sum(axis=1)
    k = np.maximum(1, np.rint(n * self.masked_lm_prob).astype(np.int64))
    return np.minimum(np.minimum(k, self.max_predictions), n)

  def __call__(self, input_ids: np.ndarray, epoch, index) -> dict[str, np.ndarray]:
    """Masks a batch.

    Args:
      input_ids: [B, L] int32 padded ids (padding must be a special id).
      epoch: [B] or scalar epoch of each sequence.
      index: [B] global example index of each sequence.

    Returns:
      input_ids [B, L] int32 with the replacements; masked_lm_positions [B, P] int32
      ascending then 0-padded; masked_lm_ids [B, P] int32 original ids (0 padding);
      masked_lm_weights [B, P] float32 (1 real, 0 padding); P = max_predictions.
    """
    batch, length = input_ids.shape
    keys = example_keys(self.seed, epoch, index)  # [B]
    cand = self.candidates(input_ids)  # [B, L]
    k = self.num_to_predict(cand)  # [B]
    u = uniforms(keys, 0, length)  # [B, L]
    if self.whole_word_mask:
      pos = self._choose_words(input_ids, cand, k, u)
    else:
      pos = self._choose_tokens(cand, k, u)
    p = self.max_predictions
    if pos.shape[1] < p:  # max_predictions > L: pad the columns
      pos = np.pad(pos, ((0, 0), (0, p - pos.shape[1])), constant_values=length)
    pos = pos[:, :p]
    weights = pos < length  # [B, P]
    pos = np.where(weights, pos, 0)
    orig = np.take_along_axis(input_ids, pos, axis=1)  # [B, P]

    # [B, P]: r < mask_token_prob [MASK], r >= 1 - random_token_prob random, between them
    # unchanged (the random slots at the top: BERT's 0.8 / 0.1 give the masks they always did).
    r = uniforms(keys, 1, p)
    new = np.where(r < self.mask_token_prob, self.mask_id, orig)
    # Draw (a binary search each) only for the slots that get a random token.
    replace = weights & (r >= 1.0 - self.random_token_prob)
    new[replace] = self.sampler.from_uniform(uniforms(keys, 2, p)[replace])
    out = input_ids.copy()
    rows, cols = np.nonzero(weights)
    out[rows, pos[rows, cols]] = new[rows, cols]
    return {
        "input_ids": out.astype(np.int32, copy=False),
        "masked_lm_positions": pos.astype(np.int32),
        "masked_lm_ids": np.where(weights, orig, 0).astype(np.int32),
        "masked_lm_weights": weights.astype(np.float32),
    }

  def _choose_tokens(self, cand, k, u):
    """[B, min(P, L)] chosen positions ascending, L where unused."""
    batch, length = cand.shape
    p = min(self.max_predictions, length)
    score = np.where(cand, u, 2.0)  # non-candidates sort last
    if p < length:  # O(L) partition instead of a full sort: only the p best matter
      top = np.argpartition(score, p - 1, axis=1)[:, :p]  # [B, p] unordered
    else:
      top = np.broadcast_to(np.arange(length), (batch, length))
    order = np.argsort(np.take_along_axis(score, top, axis=1), axis=1)
    top = np.take_along_axis(top, order, axis=1)  # [B, p] by increasing score
    chosen = np.arange(p) < k[:, None]
    return np.sort(np.where(chosen, top, length), axis=1)

  def _choose_words(self, input_ids, cand, k, u):
    """Whole words: a `##` piece right after a candidate token joins its word."""
    batch, length = cand.shape
    ar = np.arange(length)
    prev = np.zeros_like(cand)
    prev[:, 1:] = cand[:, :-1]
    start = cand & ~(self._continuation[input_ids] & prev)  # [B, L] first piece of a word
    word = np.maximum.accumulate(np.where(start, ar, 0), axis=1)  # [B, L] its start position
    word = np.where(cand, word, -1)  # so a word never runs on into a following [SEP]
    score = np.where(cand, np.take_along_axis(u, np.maximum(word, 0), axis=1), 2.0)
    order = np.argsort(score, axis=1, kind="stable")  # words contiguous, pieces in order
    sword = np.take_along_axis(word, order, axis=1)
    scand = np.take_along_axis(cand, order, axis=1)
    last = np.ones_like(cand)
    last[:, :-1] = sword[:, 1:] != sword[:, :-1]
    # Rank of the last piece of each token's word: a word is in iff it ends before k.
    word_end = np.minimum.accumulate(np.where(last, ar, length)[:, ::-1], axis=1)[:, ::-1]
    chosen = scand & (word_end < k[:, None])
    return np.sort(np.where(chosen, order, length), axis=1)[:, :self.max_predictions]
