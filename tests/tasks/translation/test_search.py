"""Translation-level decoding: the GRU step function on the shared searches."""
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.models.rnn import GRUConfig, GRUSeq2Seq
from bert_jax.tasks.translation import search
from bert_jax.tasks.translation.data import BOS, EOS

SRC = jnp.array([[5, 6, 7, 8, 2, 0], [9, 10, 2, 0, 0, 0], [11, 2, 0, 0, 0, 0]])  # [B, S]
MAX_LEN = 7


def _gru():
  model = GRUSeq2Seq(GRUConfig(vocab_size=13, embed_dim=8, hidden_size=16, attention_units=8,
                               deterministic=True))
  params = model.init({"params": jax.random.key(1)}, SRC, SRC[:, :3])["params"]
  return model, params


def _steps(model):
  """The model's encode and decode_step, jitted: one compile each, not eager op-by-op."""
  encode = jax.jit(lambda p, src: model.apply({"params": p}, src, method="encode"))
  decode_step = jax.jit(lambda p, cache, tokens: model.apply({"params": p}, cache, tokens,
                                                             method="decode_step"))
  return encode, decode_step


def _manual_greedy(model, params):
  """Argmax one token at a time with the model's own decode_step (no shared search)."""
  encode, decode_step = _steps(model)
  cache = encode(params, SRC)
  tokens, out, done = jnp.full((3,), BOS), [], np.zeros(3, bool)
  limit = np.asarray((SRC > 0).sum(1)) + 2                       # max_extra_length 2
  for t in range(MAX_LEN):
    logits, cache = decode_step(params, cache, tokens)
    tokens = jnp.argmax(logits, -1).astype(jnp.int32)
    step = np.where(done | (t >= limit), 0, np.asarray(tokens))
    out.append(step)
    done |= (np.asarray(tokens) == EOS) | (t + 1 >= limit)
  return np.stack(out, 1)


def test_gru_greedy_equals_a_hand_loop_and_beam_one():
  model, params = _gru()
  kw = dict(alpha=0.6, max_len=MAX_LEN, max_extra_length=2)
  greedy = search.translate_ids(model, "gru", params, SRC, beam_size=1, **kw)
  np.testing.assert_array_equal(greedy, _manual_greedy(model, params))
  beam1 = jax.jit(lambda p: search.translate_ids(model, "gru", p, SRC, beam_size=1, **kw))
  np.testing.assert_array_equal(beam1(params), greedy)


def test_gru_beam_search_keeps_rows_apart_and_scores_at_least_greedy():
  """Beam 3 over a batch equals beam 3 over each row alone (the cache is gathered per
  row), and its best hypothesis is never less likely (under the length penalty with
  alpha 0) than the greedy one."""
  model, params = _gru()
  kw = dict(alpha=0.0, max_len=MAX_LEN, max_extra_length=2)
  # Jitted: one compile per (rows, beam) instead of eager encode and loops on each call.
  run = jax.jit(lambda p, src, beam: search.translate_ids(model, "gru", p, src,
                                                          beam_size=beam, **kw),
                static_argnums=2)
  batch = run(params, SRC, 3)
  for b in range(3):
    alone = run(params, SRC[b:b + 1], 3)
    np.testing.assert_array_equal(batch[b:b + 1], alone)
  greedy = run(params, SRC, 1)

  def logprob(seqs):
    encode, decode_step = _steps(model)
    cache = encode(params, SRC)
    tokens, total = jnp.full((3,), BOS), np.zeros(3)
    alive = np.ones(3, bool)
    for t in range(MAX_LEN):
      logits, cache = decode_step(params, cache, tokens)
      lp = np.asarray(jax.nn.log_softmax(logits))
      tok = np.asarray(seqs[:, t])
      alive &= tok > 0
      total += np.where(alive, lp[np.arange(3), tok], 0.0)
      alive &= tok != EOS
      tokens = jnp.asarray(np.maximum(tok, 0), jnp.int32)
    return total

  assert (logprob(batch) >= logprob(greedy) - 1e-4).all()
