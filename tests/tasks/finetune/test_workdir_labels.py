"""labels.json: the label set a fine-tuning run trained with, as predict mode reads it."""
import json
import types

import pytest

from bert_jax.tasks.finetune import workdir_labels


def _task(labels, name="classification"):
  return types.SimpleNamespace(name=name, label_list=labels)


def test_written_once_read_back_in_order_and_another_set_refused(tmp_path):
  workdir = str(tmp_path / "run")
  assert workdir_labels.read(workdir) is None  # a workdir without one (an older run)
  # Names as they are: a comma or a space inside one is kept (a "a,b" string would split).
  workdir_labels.keep_or_write(_task(("pos", "neg", "so, so")), workdir)
  saved = json.loads((tmp_path / "run" / "labels.json").read_text(encoding="utf-8"))
  assert saved == {"task": "classification", "labels": ["pos", "neg", "so, so"]}
  assert workdir_labels.read(workdir) == ("pos", "neg", "so, so")
  workdir_labels.keep_or_write(_task(["pos", "neg", "so, so"]), workdir)  # the same: kept
  with pytest.raises(ValueError) as e:
    workdir_labels.keep_or_write(_task(("neg", "pos")), workdir)
  assert "\n" not in str(e.value)
  assert "holds the labels ['pos', 'neg', 'so, so'], this run's are ['neg', 'pos']" in str(
      e.value)
  assert workdir_labels.read(workdir) == ("pos", "neg", "so, so")  # untouched


def test_tasks_without_a_label_set_write_none(tmp_path):
  """SQuAD and regression (label_list None) have nothing to save."""
  workdir_labels.keep_or_write(_task(None, "squad"), str(tmp_path))
  workdir_labels.keep_or_write(types.SimpleNamespace(name="squad"), str(tmp_path))
  assert not (tmp_path / "labels.json").exists()


def test_an_unreadable_file_is_one_line(tmp_path):
  (tmp_path / "labels.json").write_text('{"task": "ner", "lab')  # a write cut short
  with pytest.raises(ValueError, match=r"labels.json is not a readable label list "
                     r"\(JSONDecodeError\): a write cut short\? Delete it"):
    workdir_labels.read(str(tmp_path))
  (tmp_path / "labels.json").write_text('{"labels": [0, 1]}')
  with pytest.raises(ValueError, match="'labels' must be a list of strings"):
    workdir_labels.read(str(tmp_path))
