"""The deterministic WordPiece trainer: hand-worked merges, order independence, the same
bytes in separate processes, and agreement with the tokenizers library's trainer."""
import collections
import os
import random
import subprocess
import sys

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.data import wordpiece

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_merges_worked_by_hand():
  # Alphabet a b c (code point order), continuation forms ##b ##c; pairs (a,##b)=5 and
  # (##b,##c)=2: "ab" first, then (ab,##c)=2 gives "abc"; then no pair is left.
  vocab = wordpiece.train({"ab": 3, "abc": 2}, vocab_size=100, special_tokens=["[PAD]"])
  assert vocab == ["[PAD]", "a", "b", "c", "##b", "##c", "ab", "abc"]
  # A tie (both pairs seen twice) goes to the pair of smaller ids; vocab_size stops it.
  assert wordpiece.train({"cd": 2, "ab": 2}, vocab_size=9) == [
      "a", "b", "c", "d", "##b", "##d", "ab", "cd"]
  assert wordpiece.train({"cd": 2, "ab": 2}, vocab_size=7)[-1] == "ab"
  # min_frequency: a pair seen once is not merged.
  assert wordpiece.train({"ab": 1}, vocab_size=100) == ["a", "b", "##b"]
  # "abab": (a,##b), (##b,##a), (##a,##b) tie at 2; (a,##b) has the smallest ids, then
  # (##a,##b) beats (ab,##a), then (ab,##ab).
  assert wordpiece.train({"abab": 2}, vocab_size=100) == ["a", "b", "##a", "##b", "ab", "##ab",
                                                          "abab"]


def test_limit_alphabet_keeps_the_most_frequent_characters():
  vocab = wordpiece.train({"aaaa": 5, "bb": 3, "c": 1}, vocab_size=4, limit_alphabet=2)
  assert vocab[:2] == ["a", "b"] and "c" not in vocab


def _corpus(testdata):
  texts = []
  for name in ("tiny_corpus.txt", "paragraphs.txt"):
    with open(testdata(name), encoding="utf-8") as f:
      texts += [line for line in f if line.strip()]
  return texts


def test_word_order_and_chunking_do_not_matter(testdata):
  texts = _corpus(testdata)
  ref = tokenizer_lib.train_wordpiece(texts, vocab_size=300)
  shuffled = list(texts)
  random.Random(0).shuffle(shuffled)
  again = tokenizer_lib.train_wordpiece(shuffled, vocab_size=300)
  assert ref.get_vocab(True) == again.get_vocab(True)
  # Counts added in two halves (as Beam workers do) give the same vocabulary.
  halves = wordpiece.count_words(texts[::2]) + wordpiece.count_words(texts[1::2])
  assert wordpiece.train(halves, 300, tokenizer_lib.SPECIAL_TOKENS) == [
      ref.id_to_token(i) for i in range(ref.get_vocab_size())]


_TRAIN = """
import sys
from bert_jax.data import wordpiece
texts = [open(p, encoding="utf-8").read() for p in sys.argv[2:]]
vocab = wordpiece.train(wordpiece.count_words(texts), 400, ["[PAD]", "[UNK]"])
open(sys.argv[1], "w", encoding="utf-8").write("".join(t + "\\n" for t in vocab))
"""


def test_separate_processes_write_the_same_vocab_bytes(tmp_path, testdata):
  """tokenizers' own trainer gives different ids from process to process (its hash maps
  are seeded per process); this one must not."""
  env = dict(os.environ, PYTHONPATH=ROOT)
  outs = []
  for i in range(2):
    path = str(tmp_path / f"vocab{i}.txt")
    subprocess.run([sys.executable, "-c", _TRAIN, path, testdata("tiny_corpus.txt"),
                    testdata("paragraphs.txt")], check=True, env=env, cwd=ROOT)
    with open(path, "rb") as f:
      outs.append(f.read())
  assert outs[0] == outs[1] and outs[0].count(b"\n") == 267  # the corpus runs out of pairs


def test_agrees_with_the_tokenizers_library_up_to_ties():
  """The same algorithm as tokenizers' WordPieceTrainer: on the embedded Wikipedia excerpt
  the token sets may differ only in late merges whose counts tie (other tie-breaking)."""
  import itertools  # pylint: disable=g-import-not-at-top
  from bert_jax.data import corpora  # pylint: disable=g-import-not-at-top
  from bert_jax.data import documents_builder  # pylint: disable=g-import-not-at-top
  # The first 40 articles, read without parsing the dump's other 66 (~2 s).
  texts = [documents_builder.document_text(d) for d in itertools.islice(
      corpora.wiki_dump_documents(corpora.gensim_test_data(corpora.WIKI_EXCERPT),
                                  collections.Counter()), 40)]
  tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
  tok.normalizer = normalizers.BertNormalizer(lowercase=True)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  trainer = trainers.WordPieceTrainer(vocab_size=1000, min_frequency=2, show_progress=False,
                                      special_tokens=list(tokenizer_lib.SPECIAL_TOKENS),
                                      limit_alphabet=1000, continuing_subword_prefix="##")
  tok.train_from_iterator(texts, trainer)
  theirs = set(tok.get_vocab())
  ours = set(wordpiece.train(wordpiece.count_words(texts), 1000, tokenizer_lib.SPECIAL_TOKENS))
  assert len(ours) == len(theirs) == 1000
  assert len(ours & theirs) / len(ours | theirs) > 0.99  # 1.0 when measured


def test_sample_is_a_deterministic_fraction():
  texts = [f"document {i}" for i in range(20_000)]
  picked = [t for t in texts if wordpiece.in_sample(t, 0.25)]
  assert abs(len(picked) / len(texts) - 0.25) < 0.01
  assert picked == [t for t in texts if wordpiece.in_sample(t, 0.25)]
  assert wordpiece.sample_fraction(4000, 1000) == 0.25
  assert wordpiece.sample_fraction(500, 1000) == wordpiece.sample_fraction(0, 1000) == 1.0
  assert collections.Counter(wordpiece.WordCounter(True).words("Héllo, World!")) == {
      "hello": 1, ",": 1, "world": 1, "!": 1}
