"""bert_jax/decoding: cached steps vs full forward passes, searches vs hand computations,
sampling frequencies vs the renormalized softmax (chi-square)."""
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from bert_jax import decoding as D
from bert_jax.layers.config import TransformerConfig
from bert_jax.layers.param_layout import unrolled_to_scan
from bert_jax.models.gpt import GPT
from bert_jax.models.seq2seq import Transformer, shift_right

# A larger init_std than BERT's 0.02 so a random model's argmax is not one repeated token.
TINY = TransformerConfig(vocab_size=40, hidden_size=16, num_layers=2, num_heads=4, mlp_dim=24,
                         max_len=24, deterministic=True, layer_norm_eps=1e-6, type_vocab_size=0,
                         init_std=0.3)
SEQ2SEQ = TINY.replace(position="sinusoidal", num_decoder_layers=2, scale_embeddings=True,
                       init="xavier", activation="relu")
PAD, BOS, EOS = 0, 1, 2


def _init(model, *args):
  return nn.meta.unbox(model.init(jax.random.key(0), *args)["params"])


# ------------------------------------------------------------------- cache layout
def test_batch_axis_rule():
  cache = {"index": jnp.zeros(()), "hidden": jnp.zeros((3, 5)),
           "dec": {"layers": {"k": jnp.zeros((2, 3, 7)), "cache_index": jnp.zeros((2,))},
                   "layers_0": {"k": jnp.zeros((3, 7))}}}
  axes = jax.tree_util.tree_map_with_path(lambda p, x: D.batch_axis(p, x), cache)
  assert axes == {"index": None, "hidden": 0,
                  "dec": {"layers": {"k": 1, "cache_index": None}, "layers_0": {"k": 0}}}
  expanded = D.expand_beams(cache, 2)
  assert expanded["dec"]["layers"]["k"].shape == (2, 6, 7)
  assert expanded["hidden"].shape == (6, 5) and expanded["index"].shape == ()
  tagged = {"h": jnp.arange(6.0)[:, None], "cross_keys": jnp.arange(6.0)[:, None]}
  got = D.gather_beams(tagged, jnp.array([[1, 1], [0, 0], [1, 0]]), 2)
  np.testing.assert_array_equal(got["h"][:, 0], [1, 1, 2, 2, 5, 4])
  np.testing.assert_array_equal(got["cross_keys"], tagged["cross_keys"])  # row constants


# ----------------------------------------------------- cached == teacher-forced
@pytest.mark.parametrize("position,scan", [("learned", False), ("rotary", True),
                                           ("relative", False), ("relative", True),
                                           ("sinusoidal", False)])
def test_gpt_cached_steps_equal_full_forward(position, scan):
  """Left-padded prompts of lengths 3 and 5 prefilled in one call, then one token per
  call: every real position's logits equal the uncached forward of that row alone."""
  cfg = TINY.replace(position=position, scan_layers=scan, pre_ln=True)
  model = GPT(cfg)
  ids = jax.random.randint(jax.random.key(1), (2, 9), 3, 40)
  params = _init(model, ids)
  full = model.apply({"params": params}, ids)                            # [2, 9, vocab]
  lengths, width, steps = np.array([3, 5]), 5, 4
  prompt = jnp.where(jnp.arange(width)[None] < lengths[:, None], ids[:, :width], PAD)
  left, valid = D.left_align(prompt, jnp.asarray(lengths))
  step = D.gpt_step_fn(model, params)
  logits, cache = jax.jit(step)(left, D.gpt_init_cache(model, 2, width + steps), valid=valid)
  for b, n in enumerate(lengths):
    np.testing.assert_allclose(logits[b, width - n:], full[b, :n], atol=1e-5)
  last, last_cache = jax.jit(D.gpt_step_fn(model, params, last_only=True))(
      left, D.gpt_init_cache(model, 2, width + steps), valid=valid)
  assert last.shape == (2, 1, logits.shape[-1])                          # the prefill's one row
  np.testing.assert_allclose(last, logits[:, -1:], atol=1e-6)
  jax.tree_util.tree_map(np.testing.assert_array_equal, last_cache, cache)
  one = jax.jit(step)
  for t in range(steps):
    tokens = ids[jnp.arange(2), lengths + t][:, None]                    # [2, 1]
    logits, cache = one(tokens, cache)
    np.testing.assert_allclose(logits[:, 0], full[jnp.arange(2), lengths + t], atol=1e-5)


@pytest.mark.parametrize("scan,matmul_dtype", [(False, None), (True, None),
                                                (False, "bfloat16")])
def test_seq2seq_cached_steps_equal_full_forward(scan, matmul_dtype):
  """Also with bf16 matmul operands: the cached steps round what the full pass rounds."""
  cfg = SEQ2SEQ.replace(scan_layers=scan, matmul_dtype=matmul_dtype)
  src = jnp.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])
  inputs = shift_right(jnp.array([[3, 4, 5, 6, 7], [8, 9, 10, 11, 12]]), BOS)
  model = Transformer(cfg)
  params = _init(model, src, inputs)
  full = model.apply({"params": params}, src, inputs)                     # [2, 5, vocab]
  encoded = model.apply({"params": params}, src, src > 0, method="encode")
  cache = D.seq2seq_init_cache(model, params, encoded, src > 0, 7)
  cross = cache["model"]["decoder"]["layers" if scan else "layers_0"]["cross_attention"]
  assert "cross_key" in cross and "key" not in cross                     # projected once
  step = jax.jit(D.seq2seq_step_fn(model, params))
  for i in range(5):
    logits, cache = step(inputs[:, i:i + 1], cache)
    np.testing.assert_allclose(logits[:, 0], full[:, i], atol=1e-5)
  # A new encoder output against a cache that holds the old one's K/V: an error, not a
  # decode that silently ignores it.
  dm = D.decode_model(model)
  with pytest.raises(ValueError, match="already holds cross_key/cross_value"):
    dm.apply({"params": params, "cache": cache["model"]}, encoded, src > 0, inputs[:, :1],
             method="decode", mutable=["cache"])


# ------------------------------------------------------------------------ searches
@pytest.fixture(scope="module")
def seq2seq():
  src = jnp.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14], [20, 21, 0, 0, 0, 0]])
  model = Transformer(SEQ2SEQ)
  return model, _init(model, src, src[:, :3]), src


@functools.lru_cache(maxsize=None)
def _forward(model):
  return jax.jit(lambda params, src, tgt_in: model.apply({"params": params}, src, tgt_in))


def _score(model, params, src, seq, alpha, width=8):
  """log P(seq | src) / lp(|seq|) by teacher forcing (seq up to and including EOS).

  seq is right-padded to `width` (one compile): the causal decoder's logits at a position
  do not depend on the padding after it.
  """
  n = len(seq)
  padded = jnp.asarray(list(seq) + [PAD] * (width - n))[None]             # [1, width]
  logp = jax.nn.log_softmax(_forward(model)(params, src[None], shift_right(padded, BOS)))
  total = float(jnp.take_along_axis(logp[0, :n], padded[0, :n, None], axis=1).sum())
  return total / ((5 + n) / 6) ** alpha


def _trim(seq):
  seq = list(np.asarray(seq))
  return seq[:seq.index(EOS) + 1] if EOS in seq else seq


def test_beam_size_one_equals_greedy(seq2seq):
  model, params, src = seq2seq
  kw = dict(max_len=8, bos_id=BOS, extra_len=None)
  # An EOS the model cannot emit: both run to max_len, so beam 1 must be the greedy path.
  greedy, _ = D.seq2seq_generate(model, params, src, src > 0, method="greedy", eos_id=99, **kw)
  beam, scores = D.seq2seq_generate(model, params, src, src > 0, beam_size=1, eos_id=99,
                                    alpha=0.6, **kw)
  np.testing.assert_array_equal(beam, greedy)
  for b in range(3):
    assert scores[b] == pytest.approx(_score(model, params, src[b], greedy[b], 0.6), abs=1e-4)
  # A real EOS, alpha 0: beam 1 keeps every EOS ending it met, so it returns the greedy
  # sequence or a finished one with a higher log-prob, never a worse one.
  greedy, _ = D.seq2seq_generate(model, params, src, src > 0, method="greedy", eos_id=EOS, **kw)
  beam, scores = D.seq2seq_generate(model, params, src, src > 0, beam_size=1, eos_id=EOS,
                                    alpha=0.0, **kw)
  for b in range(3):
    g = _score(model, params, src[b], _trim(greedy[b]), 0.0)
    assert scores[b] == pytest.approx(_score(model, params, src[b], _trim(beam[b]), 0.0),
                                      abs=1e-4)
    assert scores[b] >= g - 1e-4
    if _trim(beam[b]) == _trim(greedy[b]):
      assert scores[b] == pytest.approx(g, abs=1e-4)


def test_beam_search_scanned_equals_unrolled(seq2seq):
  model, params, src = seq2seq
  kw = dict(max_len=8, bos_id=BOS, eos_id=EOS, beam_size=3)
  seqs, scores = D.seq2seq_generate(model, params, src, src > 0, **kw)
  scanned = Transformer(SEQ2SEQ.replace(scan_layers=True))
  seqs2, scores2 = D.seq2seq_generate(scanned, unrolled_to_scan(params), src, src > 0, **kw)
  np.testing.assert_array_equal(seqs, seqs2)
  np.testing.assert_allclose(scores, scores2, atol=1e-5)
  for b in range(3):  # the returned score is the returned sequence's
    assert scores[b] == pytest.approx(_score(model, params, src[b], _trim(seqs[b]), 0.6),
                                      abs=1e-4)


# A second-order toy model over {pad, BOS, EOS, A, B, C}: the next-token distribution
# depends on the previous two tokens, the older one kept in the cache, so beam search is
# right only if it re-gathers the cache with its beams.
A, B, C = 3, 4, 5


def _toy_table():
  probs = np.full((6, 6, 6), 1e-9)
  probs[:, :, EOS] = 0.9               # default: end
  probs[:, :, A] = probs[:, :, B] = 0.05
  probs[PAD, BOS] = [0, 0, 0, 0.6, 0.4, 0]       # first token: A .6, B .4
  probs[BOS, A] = [0, 0, 0.4, 0.3, 0.3, 0]       # after A: EOS .4
  probs[BOS, B] = [0, 0, 0.9, 0.05, 0.05, 0]     # after B: EOS .9
  probs[:, C] = [0, 0, 0, 0, 0, 1.0]             # C repeats forever
  probs[PAD, C] = [0, 0, 0, 0, 0, 1.0]
  return jnp.log(jnp.asarray(probs / probs.sum(-1, keepdims=True), jnp.float32) + 1e-30)


def _toy_step(ids, cache):
  logits = _toy_table()[cache["prev"], ids[:, -1]]                       # [B, vocab]
  return logits[:, None], {"prev": ids[:, -1]}


def test_beam_search_finds_what_greedy_misses():
  bos = jnp.array([BOS, C])
  cache = {"prev": jnp.array([PAD, PAD])}
  greedy = jax.jit(lambda c, b: D.greedy_search(_toy_step, c, b, max_len=5, eos_id=EOS))
  np.testing.assert_array_equal(greedy(cache, bos), [[A, EOS, 0, 0, 0], [C] * 5])
  beam = jax.jit(lambda c, b: D.beam_search(_toy_step, c, b, beam_size=2, max_len=5,
                                            eos_id=EOS, alpha=0.6, row_max_len=jnp.array([5, 3])))
  seqs, scores = beam(cache, bos)
  lp = lambda n: ((5 + n) / 6) ** 0.6
  # Row 0: P(B EOS) = .4 * .9 = .36 beats greedy's P(A EOS) = .6 * .4 = .24, which is
  # second: the next best ending, A A EOS (.6 * .3 * .9 = .162, length 3), scores lower.
  np.testing.assert_array_equal(seqs[0], [[B, EOS, 0, 0, 0], [A, EOS, 0, 0, 0]])
  np.testing.assert_allclose(scores[0], [math.log(0.36) / lp(2), math.log(0.24) / lp(2)],
                             rtol=1e-5)
  assert math.log(0.162) / lp(3) < math.log(0.24) / lp(2)
  # Row 1 never ends: it is cut at its own limit of 3 tokens, the rest padded.
  np.testing.assert_array_equal(seqs[1, 0], [C, C, C, 0, 0])
  np.testing.assert_allclose(scores[1, 0], 0.0, atol=1e-5)


# ------------------------------------------------------------------------ sampling
@pytest.fixture(scope="module")
def gpt():
  model = GPT(TINY.replace(pre_ln=True))
  return model, _init(model, jnp.zeros((1, 4), jnp.int32))


def _reference_greedy(model, params, prompt, n):
  """Uncached greedy: the whole sequence so far through the model for every new token.

  Rows are right-padded to one width (one compile): causal attention makes the logits at
  position t independent of the padding after it.
  """
  width = len(prompt) + n
  forward = jax.jit(lambda ids: model.apply({"params": params}, ids))
  seq = list(prompt)
  for _ in range(n):
    logits = forward(jnp.array([seq + [PAD] * (width - len(seq))]))   # [1, width, V]
    seq.append(int(jnp.argmax(logits[0, len(seq) - 1])))
  return seq[len(prompt):]


def test_batched_prompts_equal_one_at_a_time(gpt):
  model, params = gpt
  prompts = [[5, 6, 7], [8], [9, 10, 11, 12, 13]]
  padded = jnp.array([p + [PAD] * (5 - len(p)) for p in prompts])
  lengths = jnp.array([len(p) for p in prompts])
  batched = D.gpt_generate(model, params, padded, lengths, max_new_tokens=6, temperature=0.0)
  for b, p in enumerate(prompts):
    expect = _reference_greedy(model, params, p, 6)         # uncached, one forward per token
    assert len(set(expect)) > 1                             # not a degenerate model
    np.testing.assert_array_equal(batched[b], expect)
  alone = D.gpt_generate(model, params, jnp.array([prompts[0]]), jnp.array([3]),
                         max_new_tokens=6, temperature=0.0)
  np.testing.assert_array_equal(alone[0], batched[0])
  # top_k=1 sampling is greedy whatever the rng.
  top1 = D.gpt_generate(model, params, padded, lengths, max_new_tokens=6,
                        rng=jax.random.key(3), temperature=1.0, top_k=1)
  np.testing.assert_array_equal(top1, batched)


def test_eos_rows_stay_padded(gpt):
  model, params = gpt
  free = D.gpt_generate(model, params, jnp.array([[5, 6], [9, 0]]), jnp.array([2, 1]),
                        max_new_tokens=6, temperature=0.0)
  eos = int(free[0, 1])                     # row 0 emits it second
  assert int(free[0, 0]) != eos
  out = D.gpt_generate(model, params, jnp.array([[5, 6], [9, 0]]), jnp.array([2, 1]),
                       max_new_tokens=6, temperature=0.0, eos_id=eos, pad_id=PAD)
  np.testing.assert_array_equal(out[0], [free[0, 0], eos, PAD, PAD, PAD, PAD])
  row1 = list(np.asarray(free[1]))
  cut = row1.index(eos) + 1 if eos in row1 else 6
  np.testing.assert_array_equal(out[1], row1[:cut] + [PAD] * (6 - cut))
  # Greedy search likewise: after EOS, pad.
  seqs = D.greedy_search(_toy_step, {"prev": jnp.array([PAD])}, jnp.array([BOS]),
                         max_len=4, eos_id=EOS, pad_id=PAD)
  np.testing.assert_array_equal(seqs, [[A, EOS, PAD, PAD]])


LOGITS = np.array([2.0, 1.2, 0.9, 0.3, -0.2, -1.0, -1.7, -3.0], np.float32)


def _expected_probs(temperature, top_k, top_p):
  """The renormalized softmax over the kept set, written out in numpy."""
  z = LOGITS.astype(np.float64) / temperature
  p = np.exp(z - z.max())
  p /= p.sum()
  order = np.argsort(-p)
  keep = np.zeros(len(p), bool)
  keep[order[:top_k or len(p)]] = True
  p = np.where(keep, p, 0.0)
  p /= p.sum()
  mass, nucleus = 0.0, np.zeros(len(p), bool)
  for i in np.argsort(-p):          # the fewest most likely tokens with mass >= top_p
    if mass >= top_p:
      break
    nucleus[i] = True
    mass += p[i]
  p = np.where(nucleus, p, 0.0)
  return p / p.sum()


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.7, 0, 1.0), (1.0, 3, 1.0),
                                                     (1.0, 0, 0.8), (1.6, 5, 0.9)])
def test_sampled_frequencies_match_renormalized_softmax(temperature, top_k, top_p):
  n = 20_000
  fixed = lambda ids, cache, valid=None: (
      jnp.broadcast_to(jnp.asarray(LOGITS), ids.shape + LOGITS.shape), cache)
  draws = D.sample(fixed, {}, jnp.ones((n, 1), jnp.int32), jnp.ones((n,), jnp.int32),
                   max_new_tokens=1, rng=jax.random.key(1234), temperature=temperature,
                   top_k=top_k, top_p=top_p)[:, 0]
  counts = np.bincount(np.asarray(draws), minlength=len(LOGITS))
  expect = _expected_probs(temperature, top_k, top_p)
  kept = expect > 0
  assert 1 < kept.sum() < len(LOGITS) or (top_k == 0 and top_p == 1.0)
  assert counts[~kept].sum() == 0                          # filtered tokens never drawn
  _, p_value = stats.chisquare(counts[kept], n * expect[kept])
  assert p_value > 1e-3, (counts, n * expect)
