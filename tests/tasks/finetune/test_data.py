"""File readers and the embedded polarity set: good rows read, bad rows counted."""
import numpy as np
import pytest

from bert_jax.tasks.finetune.classification import features as classification
from bert_jax.tasks.finetune.ner import features as ner
from bert_jax.tasks.finetune.classification import data as cls_data
from bert_jax.tasks.finetune.ner import data as ner_data
from bert_jax.tasks.finetune.squad import data as squad_data
from bert_jax.tasks.finetune.squad.features import Answer
from bert_jax.tasks.finetune.ner.data import CONLL2003_NER_TAGS


def test_csv_reader_and_featurizer_count_every_bad_row(testdata, tokenizer):
  exs, log = cls_data.read_classification_file(testdata / "cls.csv")
  assert [(e.text_a, e.label) for e in exs] == [
      ("A fine, funny film.", "pos"), ("Dull and tedious.", "neg"), ("Meh.", "neutral")]
  assert exs[0].guid == "cls.csv:2"
  assert dict(log.skipped) == {"empty_text": 1, "malformed_line": 2, "missing_label": 1}
  f, flog = classification.featurize_classification(exs, tokenizer, 16, ["neg", "pos"])
  assert f["labels"].tolist() == [1, 0]  # "neutral" is skipped, never mapped
  assert flog.skipped["label_not_in_label_list"] == 1
  assert "skipped 4" in log.summary() and "malformed_line=2" in log.summary()


def test_tsv_pairs_keep_quote_chars_literal(testdata):
  exs, log = cls_data.read_classification_file(testdata / "pairs.tsv", "sentence1",
                                              "sentence2")
  assert [(e.text_a, e.text_b, e.label) for e in exs] == [
      ('He said "hi.', "He greeted.", "1"), ("The cat.", "A dog.", "0"),
      ('A "quoted" pair', "fine", "0")]
  assert dict(log.skipped) == {"malformed_line": 1, "empty_text": 1}


def test_jsonl_reader_and_wrong_column_names(testdata, tmp_path):
  exs, log = cls_data.read_classification_file(testdata / "cls.jsonl", text_a_key="text")
  assert [(e.text_a, e.label) for e in exs] == [("Great movie", 1), ("Bad movie", 0)]
  assert dict(log.skipped) == {"malformed_line": 2, "missing_field": 2, "empty_text": 1}
  with pytest.raises(ValueError, match=r"columns \['text'\] not in the header"):
    cls_data.read_classification_file(testdata / "cls.csv", text_a_key="text")
  headerless = tmp_path / "data.txt"
  headerless.write_text("good stuff\t1\n")
  exs, _ = cls_data.read_classification_file(headerless, "s", None, "y", file_format="tsv",
                                            fieldnames=["s", "y"])
  assert (exs[0].text_a, exs[0].label) == ("good stuff", "1")


def test_a_csv_without_the_columns_names_the_ones_it_needs(tmp_path):
  """One line naming what is missing and the columns the run reads, as the config names
  them (docs/fine-tuning.md: `sentence[,sentence2],label`)."""
  path = tmp_path / "train.csv"
  path.write_text("text,y\nfine,pos\n")
  fix = "(name yours with --config.data.text_a_key, text_b_key and label_key)."
  with pytest.raises(ValueError) as e:
    cls_data.read_classification_file(path)
  assert str(e.value) == (f"{path}: columns ['label', 'sentence'] not in the header "
                          f"['text', 'y']; this file needs the columns sentence,label {fix}")
  with pytest.raises(ValueError) as e:
    cls_data.read_classification_file(path, "sentence", "sentence2")
  assert "this file needs the columns sentence,sentence2,label (" in str(e.value)
  with pytest.raises(ValueError) as e:  # predict's input: the text columns only
    cls_data.read_classification_file(path, label_key=None)
  assert str(e.value).endswith(f"; this file needs the columns sentence {fix}")


def test_ner_jsonl_reader(testdata, tokenizer):
  exs, log = ner_data.read_ner_jsonl(testdata / "ner.jsonl", label_list=CONLL2003_NER_TAGS)
  assert [(list(e.words), e.tags) for e in exs] == [
      (["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
      (["Peter", "Blackburn"], ["B-PER", "I-PER"])]  # int tags named via label_list
  assert dict(log.skipped) == {"tags_length_mismatch": 1, "malformed_line": 2,
                               "empty_text": 1, "bad_tags": 1, "missing_label": 1}
  f, flog = ner.featurize_ner(exs, tokenizer, 12, CONLL2003_NER_TAGS)
  assert flog.kept == 2 and f["labels"].shape == (2, 12)


def test_conll_reader_drops_a_sentence_with_a_broken_line(testdata):
  exs, log = ner_data.read_conll_file(testdata / "conll.txt")
  assert [(list(e.words), e.tags) for e in exs] == [
      (["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"]),
      (["Peter", "Blackburn"], ["B-PER", "I-PER"]), (["Lamb"], ["O"])]
  assert dict(log.skipped) == {"malformed_line": 1}


def test_squad_json_reader(testdata):
  exs, log = squad_data.read_squad_json(testdata / "squad_v2.json")
  assert [e.qid for e in exs] == ["a1", "a2", "a6"]
  assert exs[0].answers == (Answer("Shanghai", 0), Answer("shanghai", 5))
  assert exs[1].is_impossible and exs[1].answers == ()
  assert dict(log.skipped) == {"empty_text": 1, "duplicate_id": 1, "missing_label": 1,
                               "malformed_answers": 1, "malformed_record": 2}
  assert log.notes["answer_text_mismatch"] == 1  # a1's second answer: kept as gold text
  assert squad_data.squad_gold_answers(exs) == {"a1": ["Shanghai", "shanghai"], "a2": [],
                                             "a6": ["China"]}


def test_squad_predict_input_keeps_questions_without_answers(testdata):
  """Predict mode's input is new questions: a4 (no answers) is kept there, where
  training and evaluation skip it (missing_label); the other skips are the same."""
  exs, log = squad_data.read_squad_json(testdata / "squad_v2.json", unlabeled=True)
  assert [e.qid for e in exs] == ["a1", "a2", "a4", "a6"]
  assert exs[2].answers == () and not exs[2].is_impossible
  assert dict(log.skipped) == {"empty_text": 1, "duplicate_id": 1, "malformed_answers": 1,
                               "malformed_record": 2}


def test_polarity_split_is_deterministic_balanced_and_decoded():
  train, log = cls_data.load_polarity("train")
  val, _ = cls_data.load_polarity("validation")
  test, _ = cls_data.load_polarity("test")
  assert (len(train), len(val), len(test)) == (160, 20, 20) and log.num_skipped == 0
  for split in (train, val, test):
    labels = np.array([e.label for e in split])
    assert (labels == "neg").sum() == (labels == "pos").sum()
  assert not {e.guid for e in train} & ({e.guid for e in val} | {e.guid for e in test})
  assert train[0].text_a == "simplistic , silly and tedious ."
  # cp1252 bytes: 0x97 is an em dash, 0xe9 an e-acute.
  texts = " ".join(e.text_a for e in cls_data.load_polarity("all")[0])
  assert "\u2014" in texts and "clich\u00e9s" in texts
  assert [e.text_a for e in cls_data.load_polarity("train")[0]] == [e.text_a for e in train]
