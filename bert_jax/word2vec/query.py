"""Nearest neighbours and analogies in exported word2vec vectors.

  python -m bert_jax.word2vec.query --vectors workdirs/word2vec/vectors.bin \\
      --neighbors king,queen --analogy king,man,woman --topn 10

`--neighbors w1,w2`: the topn words of highest cosine similarity to each word.
`--analogy a,b,c` (repeatable): 3CosAdd a - b + c (king - man + woman), the query words
excluded, as gensim's most_similar(positive=[a, c], negative=[b]).
Reads the word2vec text or binary format (binary when the file ends in .bin, or --binary).
"""
from __future__ import annotations

import sys

from absl import app, flags

from bert_jax.word2vec.vectors import WordVectors, is_binary, load_word2vec_format

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """The CLI's flags, defined only when it runs: importing this module for run_queries
  must not add a required --vectors to every other absl program in the process."""
  flags.DEFINE_string("vectors", None, "word2vec text or binary file.")
  flags.DEFINE_list("neighbors", [], "Words whose nearest neighbours to print.")
  flags.DEFINE_multi_string("analogy", [], "a,b,c: print the words nearest a - b + c.")
  flags.DEFINE_integer("topn", 10, "How many words to print per query.")
  flags.DEFINE_bool("binary", None, "Binary format (default: guessed from a .bin suffix).")
  flags.mark_flag_as_required("vectors")


def format_results(title: str, results: list[tuple[str, float]]) -> str:
  return "\n".join([title] + [f"  {w:<20s} {s:.4f}" for w, s in results])


def run_queries(wv: WordVectors, neighbors=(), analogies=(), topn: int = 10) -> list[str]:
  """The printed blocks; unknown words become an 'error:' line, not an exception."""
  out = []
  for word in neighbors:
    try:
      out.append(format_results(f"neighbors of {word}:", wv.neighbors(word, topn)))
    except KeyError as e:
      out.append(f"error: {e.args[0]}")
  for spec in analogies:
    words = [w.strip() for w in spec.split(",")]
    if len(words) != 3:
      out.append(f"error: --analogy takes three words a,b,c (a - b + c), got {spec!r}")
      continue
    a, b, c = words
    try:
      out.append(format_results(f"{a} - {b} + {c}:", wv.analogy(a, b, c, topn)))
    except KeyError as e:
      out.append(f"error: {e.args[0]}")
  return out


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    wv = load_word2vec_format(FLAGS.vectors, FLAGS.binary)
  except FileNotFoundError:
    print(f"error: --vectors {FLAGS.vectors} does not exist", file=sys.stderr)
    sys.exit(2)
  except (ValueError, UnicodeDecodeError) as e:  # not a word2vec file, or cut short
    kind = "binary" if is_binary(FLAGS.vectors, FLAGS.binary) else "text"
    print(f"error: --vectors {FLAGS.vectors} is not a readable word2vec {kind} file: {e}",
          file=sys.stderr)
    sys.exit(2)
  print(f"{len(wv.words)} vectors of dimension {wv.vectors.shape[1]} from {FLAGS.vectors}")
  blocks = run_queries(wv, FLAGS.neighbors, FLAGS.analogy, FLAGS.topn)
  print("\n".join(blocks))
  if any(b.startswith("error:") for b in blocks):
    sys.exit(1)


def entry():
  """The `bert-jax-word2vec-query` console script (and `python -m`)."""
  from bert_jax import hardware  # pylint: disable=g-import-not-at-top
  hardware.configure()  # before jax starts a backend
  _define_flags()
  from bert_jax.runtime import flag_help  # pylint: disable=g-import-not-at-top
  flag_help.key_flags_in_help(__name__)  # a console script's --help lists the flags too
  app.run(main)


if __name__ == "__main__":
  entry()
