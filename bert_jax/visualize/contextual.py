"""`visualize contextual`: one word's contextual vectors across sentences, compared.

BERT gives "bank" a different vector in "I was sitting by the river bank" than in "I went
to the bank to deposit money"; word2vec gives it one. The picture is the cosine-similarity
matrix of the word's vectors (a word split into pieces is averaged over its pieces),
beside word2vec's matrix (all ones: one vector whatever the context) when --vectors is given.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from bert_jax.inference import encode
from bert_jax.inference.inputs import bert_inputs
from bert_jax.inference.loader import InputError, Loaded
from bert_jax.visualize import plot


def find_pieces(tokens: Sequence[str], pieces: Sequence[str]) -> Optional[list[int]]:
  """Positions of the first run of `pieces` in `tokens` that is a whole word (not followed
  by a ## continuation), or None."""
  n = len(pieces)
  for start in range(len(tokens) - n + 1):
    if list(tokens[start:start + n]) == list(pieces):
      after = tokens[start + n] if start + n < len(tokens) else ""
      if not after.startswith("##"):
        return list(range(start, start + n))
  return None


def word_vectors(model: Loaded, word: str, sentences: Sequence[str],
                 layer: int = -1) -> np.ndarray:
  """[sentences, hidden]: the word's vector in each sentence (mean over its pieces)."""
  if model.kind != "bert":
    raise InputError(f"contextual vectors come from a BERT encoder; --checkpoint "
                     f"{model.source} is a {model.kind} model")
  if not -(model.config.num_layers + 1) <= layer <= model.config.num_layers:
    raise InputError(f"--layer {layer} out of range: this model has {model.config.num_layers}"
                     f" layers (hidden states {-(model.config.num_layers + 1)}.."
                     f"{model.config.num_layers}, 0 = embeddings)")
  pieces = model.tokenizer.encode(word, add_special_tokens=False).tokens
  if not pieces:
    raise InputError(f"--word {word!r} has no tokens")
  ids, where = [], []
  for k, sentence in enumerate(sentences):
    sentence_ids, _, tokens = bert_inputs(model.tokenizer, sentence)
    found = find_pieces(tokens, pieces)
    if found is None:
      raise InputError(f"--word {word!r} (tokens {' '.join(pieces)}) is not in sentence "
                       f"{k + 1}: {sentence!r}")
    if len(sentence_ids) > model.config.max_len:
      raise InputError(f"sentence {k + 1} has {len(sentence_ids)} tokens; this model takes "
                       f"at most {model.config.max_len}")
    ids.append(np.asarray(sentence_ids, np.int32))
    where.append(found)
  per_token = encode.run_model(model.config, model.params["bert"], ids, pooling="none",
                               layers=(layer,), max_length=model.config.max_len)
  return np.stack([per_token[k][w].mean(axis=0) for k, w in enumerate(where)])


def cosine_matrix(vectors: np.ndarray) -> np.ndarray:
  unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
  return unit @ unit.T


def _short(text: str, n: int = 34) -> str:
  return text if len(text) <= n else text[:n - 1] + "…"


def draw(word: str, sentences, bert_sim: np.ndarray, w2v_sim: Optional[np.ndarray],
         path: str) -> str:
  labels = [f"{k + 1}: {_short(s)}" for k, s in enumerate(sentences)]
  numbers = [str(k + 1) for k in range(len(sentences))]
  panels = 2 if w2v_sim is not None else 1
  side = 2.2 + 0.55 * len(sentences)
  fig, axes = plot.subplots(1, panels, side * panels + 3.0, side + 0.4)
  # The colour scale starts at the lowest cosine (to a tenth), so small gaps show.
  low = min(0.9, float(np.floor(bert_sim.min() * 10) / 10))
  plot.heatmap(axes[0, 0], bert_sim, labels, numbers, annotate=len(sentences) <= 12,
               vmin=low, vmax=1, title=f'BERT: cosine of "{word}" across sentences')
  if w2v_sim is not None:
    plot.heatmap(axes[0, 1], w2v_sim, numbers, numbers, annotate=len(sentences) <= 12,
                 vmin=low, vmax=1, title=f'word2vec: one vector for "{word}"')
  fig.tight_layout()
  return plot.save(fig, path)


def run(args, model: Loaded) -> int:
  if len(args.sentence) < 2:
    raise InputError("give at least two --sentence to compare")
  vectors = word_vectors(model, args.word, args.sentence, args.layer)
  sim = cosine_matrix(vectors)
  w2v = None
  if args.vectors:
    from bert_jax.word2vec.vectors import load_word2vec_format  # pylint: disable=g-import-not-at-top
    try:
      wv = load_word2vec_format(args.vectors)
    except (OSError, ValueError) as e:
      raise InputError(f"cannot read --vectors {args.vectors}: {e}") from None
    if args.word.lower() not in wv.index and args.word not in wv.index:
      raise InputError(f"--word {args.word!r} is not in the word2vec vocabulary of {args.vectors}")
    w2v = np.ones_like(sim)  # the same vector in every sentence: cosine 1 everywhere
  print(f'cosine similarity of "{args.word}" across sentences ({model.source}):')
  for k, s in enumerate(args.sentence):
    print(f"  {k + 1}: {s}")
  width = 6
  print(" " * 3 + "".join(f"{k + 1:>{width}}" for k in range(len(sim))))
  for k, row in enumerate(sim):
    print(f"{k + 1:>3}" + "".join(f"{v:>{width}.2f}" for v in row))
  if w2v is not None:
    print(f'word2vec ({args.vectors}): one vector for "{args.word}", cosine 1.00 between '
          "every pair")
  print(f"wrote {draw(args.word, args.sentence, sim, w2v, args.output)}")
  return 0
