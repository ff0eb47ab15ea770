"""Autoregressive decoding shared by translation and GPT: greedy, beam search, sampling.

The step-function contract (every search here drives one):

    step_fn(ids [B, T] int32, cache) -> (logits [B, T, V] float32, cache)

It appends T tokens per row to whatever state `cache` holds and returns the next-token
logits after each of them. The searches call it with T = 1; `sample` prefills a prompt in
one call with T = P and an extra keyword `valid` [B, T] bool (False = a left-padding slot
that must not be attended to nor counted as a position): step functions used with prompts
accept it, others may reject it. A step function closes over params; jit the function
that builds it (as `gpt_generate` / `seq2seq_generate` do) so params stay arguments.

The cache is any pytree. Beam search repeats and re-gathers it along each leaf's batch
axis, found from the leaf's path (decoding/cache.py): axis 1 under a "layers" key (scanned
stacks: [layers, B, ...]), else axis 0 (unrolled stacks, an RNN's hidden state [B, units]);
0-d leaves and a scanned stack's [layers] index are shared by all rows; leaves under a
"cross_*" key (encoder keys/values, the source mask) are per-source-row constants, repeated
once and never re-gathered. An RNN decoder's step function therefore needs only to keep its
state as {"hidden": [B, units], "cross_keys": [B, S, d], "cross_mask": [B, S], ...}.

Builders for our models: `gpt_step_fn` + `gpt_init_cache`, `seq2seq_step_fn` +
`seq2seq_init_cache` (the encoder runs once; its cross-attention K/V are projected once and
cached), and the jitted entry points `gpt_generate` and `seq2seq_generate`.
"""
from bert_jax.decoding.cache import batch_axis, expand_beams, gather_beams
from bert_jax.decoding.sampling import filter_logits, left_align, sample
from bert_jax.decoding.search import beam_search, greedy_search, length_penalty
from bert_jax.decoding.steps import (decode_model, gpt_generate, gpt_init_cache, gpt_step_fn,
                                     seq2seq_generate, seq2seq_init_cache, seq2seq_step_fn)

__all__ = [
    "batch_axis", "beam_search", "decode_model", "expand_beams", "filter_logits",
    "gather_beams", "gpt_generate", "gpt_init_cache", "gpt_step_fn", "greedy_search",
    "left_align", "length_penalty", "sample", "seq2seq_generate", "seq2seq_init_cache",
    "seq2seq_step_fn",
]
