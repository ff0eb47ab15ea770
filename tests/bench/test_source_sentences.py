"""bench/finetune/source_sentences.py: the Wikipedia-vs-news set of bench/finetune/vs_trainer.py
--dataset sources, checked against gensim's files themselves (no training, no timings)."""
import csv
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "bench", "finetune"), os.path.join(_ROOT, "bench")]
import source_sentences  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

from bert_jax.data import corpora  # noqa: E402  pylint: disable=g-import-not-at-top


def test_labels_are_the_sources_balanced_disjoint_and_written_as_read(tmp_path):
  data = source_sentences.build(eval_per_class=150, seed=0)
  with open(corpora.gensim_test_data(corpora.LEE_CORPUS), encoding="utf-8",
            errors="replace") as f:
    lee = f.read()
  # What the bench's docstring states: 4,886 train (38 of group_by_length's megabatch
  # batches of 32), 150 of each label held out, balanced, every sentence once.
  assert len(data["train_texts"]) == 4886
  assert sorted(data["eval_labels"]) == [0] * 150 + [1] * 150
  assert data["train_labels"].count(0) == data["train_labels"].count(1) == 2443
  assert len(set(data["train_texts"] + data["eval_texts"])) == 4886 + 300
  texts = data["train_texts"] + data["eval_texts"]
  labels = data["train_labels"] + data["eval_labels"]
  assert all(len(t.split()) >= source_sentences.MIN_WORDS for t in texts)
  # Label 1 is the Lee news file's text; label 0 (Wikipedia) sentences mostly are not in
  # it (a few short generic ones may occur in both corpora).
  assert all(t in lee for t, y in zip(texts, labels) if y == 1)
  wiki_in_lee = sum(t in lee for t, y in zip(texts, labels) if y == 0)
  assert wiki_in_lee <= 5
  overrides = source_sentences.write_csv(data, str(tmp_path))
  with open(overrides["data.eval_file"], encoding="utf-8", newline="") as f:
    rows = list(csv.DictReader(f))
  assert [r["sentence"] for r in rows] == data["eval_texts"]
  assert [int(r["label"]) for r in rows] == data["eval_labels"]
  assert overrides["data.source"] == "file"
