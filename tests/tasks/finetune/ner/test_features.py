"""NER featurization: first-sub-token labels, truncation, mapping predictions back."""
import numpy as np

from bert_jax.tasks.finetune import metrics
from bert_jax.tasks.finetune.ner import features as ner
from bert_jax.tasks.finetune.ner.features import NerExample
from bert_jax.tasks.finetune.ner.data import CONLL2003_NER_TAGS as TAGS

X = ner.IGNORE_LABEL
WORDS = ["Nadim", "Ladki", "visits", "AL-AIN", "\u200b", "Paris"]
GOLD = ["B-PER", "I-PER", "O", "B-LOC", "O", "B-LOC"]


def tag_id(t):
  return TAGS.index(t)


def test_labels_on_first_subtoken_only(tokenizer):
  f, log = ner.featurize_ner([NerExample(WORDS, GOLD)], tokenizer, 16, TAGS)
  n = int(f["input_mask"][0].sum())
  tokens = [tokenizer.id_to_token(int(i)) for i in f["input_ids"][0, :n]]
  # The zero-width space normalizes to nothing; it becomes [UNK] to keep its tag.
  assert tokens == ["[CLS]", "nad", "##im", "lad", "##ki", "visits", "al", "-", "ain",
                    "[UNK]", "paris", "[SEP]"]
  assert f["labels"][0, :n].tolist() == [
      X, tag_id("B-PER"), X, tag_id("I-PER"), X, tag_id("O"), tag_id("B-LOC"), X, X,
      tag_id("O"), tag_id("B-LOC"), X]
  assert (f["labels"][0, n:] == X).all()
  np.testing.assert_array_equal(f["label_weights"][0], f["labels"][0] != X)
  assert f["word_ids"][0, :n].tolist() == [-1, 0, 0, 1, 1, 2, 3, 3, 3, 4, 5, -1]
  assert f["num_words"].tolist() == [6] and f["segment_ids"].sum() == 0
  assert log.notes["word_without_tokens"] == 1 and log.kept == 1
  assert {k: (v.shape, v.dtype.name) for k, v in f.items()} == {
      "input_ids": ((1, 16), "int32"), "input_mask": ((1, 16), "int32"),
      "segment_ids": ((1, 16), "int32"), "labels": ((1, 16), "int32"),
      "label_weights": ((1, 16), "float32"), "word_ids": ((1, 16), "int32"),
      "num_words": ((1,), "int32"), "example_index": ((1,), "int32")}


def test_truncation_counts_cut_words_and_they_come_back_as_O(tokenizer):
  # Budget 6 tokens: nad ##im lad ##ki visits al -> "AL-AIN" keeps its first piece.
  f, log = ner.featurize_ner([NerExample(WORDS, GOLD)], tokenizer, 8, TAGS)
  assert f["word_ids"][0].tolist() == [-1, 0, 0, 1, 1, 2, 3, -1]
  assert log.notes["truncated"] == 1 and log.notes["truncated_words"] == 2
  # A "model" that is right on first sub-tokens and wrong everywhere else.
  preds = np.where(f["labels"] != X, f["labels"], tag_id("B-MISC"))
  words = ner.predictions_to_words(preds, f["word_ids"], TAGS, num_words=f["num_words"])
  assert words == [["B-PER", "I-PER", "O", "B-LOC", "O", "O"]]
  # Single-row form; without num_words the sentence ends at its last featurized word.
  assert ner.predictions_to_words(preds[0], f["word_ids"][0], TAGS) == GOLD[:4]
  r = metrics.entity_scores([GOLD], words)  # the cut "Paris" is a missed entity
  assert (r["precision"], r["recall"]) == (1.0, 2 / 3)


def test_bad_sentences_are_counted_and_skipped(tokenizer):
  exs = [
      NerExample(["EU", "rejects"], ["B-ORG", "O"]),  # kept
      NerExample(["EU", "rejects"], ["B-ORG"]),  # tags_length_mismatch
      NerExample(["EU"], ["B-COUNTRY"]),  # label_not_in_label_list
      NerExample([], []),  # empty_text
      NerExample(["unlabeled"]),  # missing_label
  ]
  f, log = ner.featurize_ner(exs, tokenizer, 8, TAGS)
  assert f["example_index"].tolist() == [0]
  assert dict(log.skipped) == {"tags_length_mismatch": 1, "label_not_in_label_list": 1,
                               "empty_text": 1, "missing_label": 1}
  f, log = ner.featurize_ner(exs[4:], tokenizer, 8, TAGS, allow_unlabeled=True)
  assert (f["labels"] == X).all() and f["word_ids"][0, 1] == 0
