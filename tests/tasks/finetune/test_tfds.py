"""tfds readers end to end on mocked data (offline). These import TensorFlow.

`tfds.testing.mock_data` finds no stored metadata for these builders in the installed
tfds, so its default AUTO policy falls back to USE_CODE (features from the builder
code). Its random records are incoherent for conll2003 and squad (each sequence gets
its own random length), which exercises the skip paths; a second mock per builder
yields coherent records through `as_dataset_fn` and runs reader -> featurizer ->
post-processing -> metric.
"""
import importlib.util

import numpy as np
import pytest

# TensorFlow is imported by the tests that use it, not at collection: every xdist worker
# collects this module, and importing TensorFlow there cost each of them 6.4 s.
if importlib.util.find_spec("tensorflow") is None:
  pytest.skip("needs tensorflow (the tf extra)", allow_module_level=True)
tfds = pytest.importorskip("tensorflow_datasets")

# pylint: disable=g-import-not-at-top,wrong-import-position
from bert_jax.tasks.finetune.classification import features as classification
from bert_jax.tasks.finetune.classification import glue
from bert_jax.tasks.finetune import metrics
from bert_jax.tasks.finetune.ner import features as ner
from bert_jax.tasks.finetune.squad import features as squad
from bert_jax.tasks.finetune.squad import metrics as squad_metrics
from bert_jax.tasks.finetune.classification import data as cls_data
from bert_jax.tasks.finetune.ner import data as ner_data
from bert_jax.tasks.finetune.squad import data as squad_data
from bert_jax.tasks.finetune.squad.postprocess import postprocess_squad



def records_mock(records):
  """mock_data(as_dataset_fn=...) serving `records` with the builder's own features."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def as_dataset(self, split, **kwargs):
    del split, kwargs
    spec = self.info.features.get_tensor_spec()
    return tf.data.Dataset.from_generator(lambda: iter(records), output_signature=spec)
  return tfds.testing.mock_data(num_examples=len(records), as_dataset_fn=as_dataset)


def test_glue_table_matches_the_installed_builders():
  from tensorflow_datasets.text import glue as tfds_glue
  configs = {c.name: c for c in tfds_glue.Glue.BUILDER_CONFIGS}
  for name, task in glue.GLUE_TASKS.items():
    assert tuple(configs[name].text_features) == task.text_keys, name
    expected = tuple(configs[name].label_classes) if configs[name].label_classes else None
    assert expected == task.label_names, name


def test_glue_sst2_mock_data_end_to_end(tokenizer):
  task = glue.get_glue_task("sst2")
  with tfds.testing.mock_data(num_examples=8):
    exs, log = cls_data.load_glue("sst2", "train")
    test_exs, _ = cls_data.load_glue("sst2", "test")
    mnli, _ = cls_data.load_glue("mnli", "validation_mismatched")
  assert log.kept == 8 and log.num_skipped == 0
  assert all(e.label in task.label_names and e.text_b is None for e in exs)
  assert all(e.label is None for e in test_exs)  # hidden test labels
  assert all(e.text_b is not None and e.label in glue.GLUE_TASKS["mnli"].label_names
             for e in mnli)
  f, flog = classification.featurize_classification(exs, tokenizer, 24, task.label_names)
  assert flog.kept == 8 and f["input_ids"].shape == (8, 24)
  assert (f["input_ids"][:, 0] == tokenizer.token_to_id("[CLS]")).all()
  want = [task.label_names.index(e.label) for e in exs]
  assert f["labels"].tolist() == want
  assert metrics.named_metrics(task.metrics, f["labels"], np.asarray(want)) == {"accuracy": 1.0}


def test_conll2003_mock_data_random_then_coherent(tokenizer):
  with tfds.testing.mock_data(num_examples=5):
    exs, log = ner_data.load_conll2003("train")
    _, info = tfds.load("conll2003", split="train", with_info=True)
  assert tuple(info.features["ner"].feature.names) == ner_data.CONLL2003_NER_TAGS
  # Random mocks give tokens/ner of unrelated lengths: counted, skipped, no crash.
  assert exs == [] and log.skipped["tags_length_mismatch"] == 5

  tags = ner_data.CONLL2003_NER_TAGS
  sentences = [(["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
               (["Peter", "Blackburn"], ["B-PER", "I-PER"])]
  records = [{"tokens": w, "pos": [0] * len(w), "chunks": [0] * len(w),
              "ner": [tags.index(t) for t in t_]} for w, t_ in sentences]
  with records_mock(records):
    exs, log = ner_data.load_conll2003("dev")
  assert [(list(e.words), e.tags) for e in exs] == [(w, t) for w, t in sentences]
  f, _ = ner.featurize_ner(exs, tokenizer, 16, tags)
  pred_words = ner.predictions_to_words(np.maximum(f["labels"], 0), f["word_ids"], tags,
                                        f["num_words"])
  assert pred_words == [t for _, t in sentences]
  assert metrics.entity_scores([e.tags for e in exs], pred_words)["f1"] == 1.0


def test_squad_v1_mock_data_random_then_coherent(tokenizer):
  with tfds.testing.mock_data(num_examples=6):
    exs, log = squad_data.load_squad("v1.1", "train")
  # Random answers: text/answer_start lists of different lengths, or not in context.
  assert log.skipped["malformed_answers"] + log.kept == 6 and log.skipped["malformed_answers"] > 0

  ctx = ("Shanghai is a City in China, it is also a financial center, its fashion "
         "capital and industrial city.")
  records = [
      {"id": "q1", "title": "Shanghai", "context": ctx,
       "question": "What is the fashion capital of China?",
       "answers": {"text": ["Shanghai"], "answer_start": [0]}},
      {"id": "q2", "title": "Shanghai", "context": ctx, "question": "In which country?",
       "answers": {"text": ["China", "in China"],
                   "answer_start": [ctx.index("China"), ctx.index("in China")]}},
  ]
  with records_mock(records):
    exs, log = squad_data.load_squad("v1.1", "validation")
  assert [e.qid for e in exs] == ["q1", "q2"] and log.num_skipped == 0
  f, _ = squad.featurize_squad(exs, tokenizer, 48, doc_stride=16, is_training=True)
  s = np.full(f["input_ids"].shape, -5.0)
  e = np.full(f["input_ids"].shape, -5.0)
  rows = np.arange(len(s))
  s[rows, f["start_positions"]] = 5.0  # a perfect model
  e[rows, f["end_positions"]] = 5.0
  preds = postprocess_squad(exs, f, s, e)
  assert preds.texts == {"q1": "Shanghai", "q2": "China"}
  scores = squad_metrics.squad_v1_scores({x.qid: [a.text for a in x.answers] for x in exs},
                                         preds.texts)
  assert (scores["exact_match"], scores["f1"]) == (100.0, 100.0)
