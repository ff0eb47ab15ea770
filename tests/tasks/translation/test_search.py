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


def _manual_greedy(model, params):
  """Argmax one token at a time with the model's own decode_step (no shared search)."""
  cache = model.apply({"params": params}, SRC, method="encode")
  tokens, out, done = jnp.full((3,), BOS), [], np.zeros(3, bool)
  limit = np.asarray((SRC > 0).sum(1)) + 2                       # max_extra_length 2
  for t in range(MAX_LEN):
    logits, cache = model.apply({"params": params}, cache, tokens, method="decode_step")
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
  batch = search.translate_ids(model, "gru", params, SRC, beam_size=3, **kw)
  for b in range(3):
    alone = search.translate_ids(model, "gru", params, SRC[b:b + 1], beam_size=3, **kw)
    np.testing.assert_array_equal(batch[b:b + 1], alone)
  greedy = search.translate_ids(model, "gru", params, SRC, beam_size=1, **kw)

  def logprob(seqs):
    cache = model.apply({"params": params}, SRC, method="encode")
    tokens, total = jnp.full((3,), BOS), np.zeros(3)
    alive = np.ones(3, bool)
    for t in range(MAX_LEN):
      logits, cache = model.apply({"params": params}, cache, tokens, method="decode_step")
      lp = np.asarray(jax.nn.log_softmax(logits))
      tok = np.asarray(seqs[:, t])
      alive &= tok > 0
      total += np.where(alive, lp[np.arange(3), tok], 0.0)
      alive &= tok != EOS
      tokens = jnp.asarray(np.maximum(tok, 0), jnp.int32)
    return total

  assert (logprob(batch) >= logprob(greedy) - 1e-4).all()
