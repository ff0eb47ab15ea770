"""Sequence classification featurization with the real uncased BERT vocabulary."""
import numpy as np
import pytest
import tokenizers

from bert_jax.tasks.finetune.classification import features as C
from bert_jax.tasks.finetune.classification.features import ClassificationExample as Ex


def test_single_sentence_layout_matches_the_tokenizers_own_template(tokenizer):
  text = "Hello world, this is BERT!"
  f, log = C.featurize_classification([Ex(text, label="pos")], tokenizer, 16, ["neg", "pos"])
  ref = tokenizer.encode(text)  # the shipped post-processor: [CLS] a [SEP]
  n = len(ref.ids)
  np.testing.assert_array_equal(f["input_ids"][0, :n], ref.ids)
  np.testing.assert_array_equal(f["input_ids"][0, n:], tokenizer.token_to_id("[PAD]"))
  np.testing.assert_array_equal(f["input_mask"][0], [1] * n + [0] * (16 - n))
  np.testing.assert_array_equal(f["segment_ids"][0], 0)
  assert f["labels"].tolist() == [1] and f["labels"].dtype == np.int32
  assert {k: v.shape for k, v in f.items()} == {
      "input_ids": (1, 16), "input_mask": (1, 16), "segment_ids": (1, 16), "labels": (1,),
      "example_index": (1,)}
  assert log.kept == 1 and log.num_skipped == 0


def test_pair_layout_and_segments_match_the_template(tokenizer):
  a, b = "The cat sat.", "A cat was sitting on the mat."
  f, _ = C.featurize_classification([Ex(a, b, 0)], tokenizer, 32, [0, 1])
  ref = tokenizer.encode(a, b)
  n = len(ref.ids)
  np.testing.assert_array_equal(f["input_ids"][0, :n], ref.ids)
  np.testing.assert_array_equal(f["segment_ids"][0, :n], ref.type_ids)
  assert f["segment_ids"][0, n:].sum() == 0


def test_truncate_seq_pair_is_longest_first_and_pops_b_on_ties():
  a, b = [1, 2, 3, 4, 5, 6], [7, 8, 9]
  assert C.truncate_seq_pair(a, b, 6) and (a, b) == ([1, 2, 3], [7, 8, 9])
  a, b = [1, 2, 3, 4], [5, 6, 7, 8]
  C.truncate_seq_pair(a, b, 5)  # 4/4 -> b; 4/3 -> a; 3/3 -> b
  assert (a, b) == ([1, 2, 3], [5, 6])
  assert not C.truncate_seq_pair([1], [2], 5)


def test_pair_truncation_in_features(tokenizer):
  ex = Ex("one two three four five six", "seven eight nine", "yes")
  f, log = C.featurize_classification([ex], tokenizer, 9, ["no", "yes"])
  expected = ["[CLS]", "one", "two", "three", "[SEP]", "seven", "eight", "nine", "[SEP]"]
  assert [tokenizer.id_to_token(int(i)) for i in f["input_ids"][0]] == expected
  assert f["segment_ids"][0].tolist() == [0] * 5 + [1] * 4
  assert log.notes["truncated"] == 1 and log.kept == 1


def test_labels_str_int_csv_strings_and_regression(tokenizer):
  exs = [Ex("a", label=1), Ex("b", label="0"), Ex("c", label=np.int64(1))]
  f, _ = C.featurize_classification(exs, tokenizer, 8, label_list=[0, 1])
  assert f["labels"].tolist() == [1, 0, 1]
  f, _ = C.featurize_classification([Ex("a", "b", "3.8"), Ex("c", "d", 1)], tokenizer, 8,
                                    regression=True)
  assert f["labels"].dtype == np.float32
  np.testing.assert_allclose(f["labels"], [3.8, 1.0])


def test_bad_examples_are_counted_and_skipped_never_mislabeled(tokenizer):
  exs = [
      Ex("good one", label="pos"),  # 0 kept
      Ex("   ", label="pos"),  # 1 empty_text
      Ex("x", "", "pos"),  # 2 empty_text_b
      Ex("neutral text", label="neutral"),  # 3 label_not_in_label_list
      Ex("no label"),  # 4 missing_label
      Ex("\x00\x01", label="neg"),  # 5 no_tokens: control chars only
      Ex("bad", label="neg"),  # 6 kept
  ]
  f, log = C.featurize_classification(exs, tokenizer, 8, ["neg", "pos"])
  assert f["example_index"].tolist() == [0, 6]
  assert f["labels"].tolist() == [1, 0]
  assert dict(log.skipped) == {"empty_text": 1, "empty_text_b": 1, "label_not_in_label_list": 1,
                               "missing_label": 1, "no_tokens": 1}
  assert "kept 2, skipped 5" in log.summary()
  f, log = C.featurize_classification([Ex("x", label="nan")], tokenizer, 8, regression=True)
  assert len(f["labels"]) == 0 and log.skipped["bad_regression_label"] == 1
  f, _ = C.featurize_classification([Ex("test item")], tokenizer, 8, ["a", "b"],
                                    allow_unlabeled=True)
  assert f["labels"].tolist() == [-1]


def test_tokenizer_with_truncation_is_copied_not_obeyed_or_mutated(tokenizer):
  truncating = tokenizers.Tokenizer.from_str(tokenizer.to_str())
  truncating.enable_truncation(max_length=4)
  truncating.enable_padding(length=6)
  f, _ = C.featurize_classification([Ex("one two three four five six", label=0)], truncating,
                                    12, [0])
  assert f["input_mask"][0].sum() == 8  # 6 words + [CLS] + [SEP]
  assert truncating.truncation["max_length"] == 4  # the caller's object is untouched


def test_class_weights_inverse_frequency_mean_one():
  labels = np.array([0, 0, 0, 1])
  w = C.class_weights(labels, 2)
  np.testing.assert_allclose(w, [4 / (2 * 3), 4 / (2 * 1)], rtol=1e-6)
  assert w[labels].mean() == pytest.approx(1.0)
  w = C.class_weights([0, 0, 1, -1], 3)  # -1 (unlabeled) ignored; class 2 absent -> 1
  np.testing.assert_allclose(w, [3 / 4, 3 / 2, 1.0], rtol=1e-6)
  np.testing.assert_array_equal(C.class_weights([0], 3, "uniform"), [1, 1, 1])
  np.testing.assert_array_equal(C.class_weights([0], 2, [0.5, 2.0]), [0.5, 2.0])
  with pytest.raises(ValueError):
    C.class_weights([0], 2, [1.0])
  with pytest.raises(ValueError):
    C.class_weights([0, 5], 2)
