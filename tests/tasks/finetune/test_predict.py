"""Predict mode needs only the workdir and the input (issue 66): the label set, tokenizer,
max length and packing are the training run's, read from its workdir, so the command
docs/fine-tuning.md shows (the `:file` config, --workdir, mode and input file, no
training files) runs as written. A workdir from before labels.json was saved is one line
saying what to pass. The tfds sources' predictions read no tfds data
(tests/tasks/finetune/test_base.py, after each run under mock data).
"""
import json
import os

import pytest

from bert_jax.configs import finetune_classification, finetune_ner
from bert_jax.tasks import registry
from bert_jax.train import loop
from tests.tasks.finetune.test_base import tiny


@pytest.fixture(scope="module", name="trained")
def _trained(tmp_path_factory):
  """A classification workdir trained at max_seq_length 32 on packed rows, its labels
  from the training file (no data.labels); the files are then out of reach."""
  root = tmp_path_factory.mktemp("predict")
  rows = [("a fine, funny film", "pos"), ("dull and tedious", "neg")] * 8
  train = root / "train.csv"
  train.write_text("sentence,label\n" + "".join(f'"{t}",{l}\n' for t, l in rows))
  c = tiny("classification", "file", "accuracy", train_file=str(train),
           eval_file=str(train), packing=True)
  workdir = str(root / "mine")
  loop.train_and_evaluate(c, workdir, registry.get_task(c))
  texts = root / "texts.csv"
  texts.write_text('sentence\n"A fine, funny film."\nDull and tedious.\n', encoding="utf-8")
  return workdir, str(train), str(texts)


def _predict_config(texts):
  """What the docs' command gives: the `:file` config with --config.mode=predict and
  --config.predict.input_file only (its defaults: max_seq_length 128, no files)."""
  c = finetune_classification.get_config("file")
  c.mode = "predict"
  c.predict.input_file = texts
  return c


def _rows(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_predict_takes_labels_length_and_tokenizer_from_the_workdir(trained, capsys):
  workdir, _, texts = trained
  assert json.loads(open(os.path.join(workdir, "labels.json"), encoding="utf-8").read()) == {
      "task": "classification", "labels": ["neg", "pos"]}
  out = registry.run(_predict_config(texts), workdir)
  # 128 would exceed the tiny model's 64 positions: the run's 32 was used.
  assert "data.max_seq_length=32" in capsys.readouterr().out
  assert out == os.path.join(workdir, "predictions.jsonl")
  rows = _rows(out)
  assert [r["guid"] for r in rows] == ["texts.csv:2", "texts.csv:3"]
  assert [r["text_a"] for r in rows] == ["A fine, funny film.", "Dull and tedious."]
  for r in rows:
    assert sorted(r) == ["guid", "label", "probabilities", "text_a"]
    assert list(r["probabilities"]) == ["neg", "pos"]  # the head's order, labels.json's
    assert r["label"] == max(r["probabilities"], key=r["probabilities"].get)
    assert sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-6)


def test_a_workdir_without_labels_json_says_what_to_pass(trained, tmp_path):
  """A run from before labels.json: one line naming the file and the two ways out; with
  the training file passed again, the predictions of the saved label set."""
  workdir, train, texts = trained
  want = _rows(registry.run(_predict_config(texts), workdir))
  saved = os.path.join(workdir, "labels.json")
  os.rename(saved, saved + ".aside")
  try:
    c = _predict_config(texts)
    with pytest.raises(ValueError) as e:
      registry.run(c, workdir)
    assert "\n" not in str(e.value)
    assert str(e.value).startswith(f"predict: {workdir} has no labels.json")
    assert "--config.data.train_file=FILE" in str(e.value)
    assert "--config.data.labels=a,b" in str(e.value)
    c.data.train_file = train
    c.predict.output_file = str(tmp_path / "again.jsonl")
    got = _rows(registry.run(c, workdir))
  finally:
    os.rename(saved + ".aside", saved)
  assert [r["label"] for r in got] == [r["label"] for r in want]
  for g, w in zip(got, want):
    for name in ("neg", "pos"):
      assert g["probabilities"][name] == pytest.approx(w["probabilities"][name], abs=1e-6)


def test_another_tasks_config_is_refused_in_one_line(trained):
  workdir, _, texts = trained
  c = finetune_ner.get_config("file")
  c.mode, c.predict.input_file = "predict", texts
  with pytest.raises(ValueError, match=r"holds a 'classification' run, not 'ner': predict "
                     "with that task's config"):
    registry.run(c, workdir)
