"""Every registered task satisfies the Task contract (tasks/base.py); train/ never
imports tasks/; the registry is the one dispatcher."""
import inspect
import os
import pathlib

import pytest

from bert_jax.tasks import base, registry
from tests.train.conftest import tiny_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY_BERT = str(ROOT / "tests" / "testdata" / "hf" / "tiny_bert")
TESTDATA = ROOT / "tests" / "testdata" / "tasks"


def _protocol_methods(proto):
  return {n: f for n, f in vars(proto).items() if callable(f) and not n.startswith("_")}


def _finetune(task, source, **data):
  from bert_jax.train.defaults import finetune_config  # pylint: disable=g-import-not-at-top
  c = finetune_config(task, source, "accuracy", max_seq_length=32, **data)
  c.init_from = TINY_BERT
  return registry.get_task(c)


# name -> a cheap instance (no data preparation). A new task adds its builder here.
BUILDERS = {
    "bert_pretraining": lambda: registry.get_task(tiny_config()),
    "classification": lambda: _finetune("classification", "file", labels="neg,pos"),
    "ner": lambda: _finetune("ner", "file", labels="O,B-PER,I-PER"),
    "squad": lambda: _finetune("squad", "file"),
    "translation": lambda: registry.get_task(_translation()),
    "lm": lambda: registry.get_task(_gpt_tiny()),
}


def _translation():
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("translation_cfg",
                                                ROOT / "configs" / "translation.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config("numbers")


def _gpt_tiny():
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("gpt", ROOT / "configs" / "gpt.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config("tiny")


@pytest.mark.parametrize("name", sorted(registry.TASKS))
def test_registered_class_has_the_protocol_methods_with_its_signatures(name):
  cls = registry.task_class(name)
  proto = base.HostScored if cls.host_scored else base.Task
  for member, want in {**_protocol_methods(base.Task), **_protocol_methods(proto)}.items():
    got = getattr(cls, member, None)
    assert callable(got), f"{name}: no {member}"
    want_params = list(inspect.signature(want).parameters)
    got_params = list(inspect.signature(got).parameters)
    if isinstance(inspect.getattr_static(cls, member), staticmethod):
      got_params = ["self"] + got_params
    assert got_params == want_params, (name, member, got_params, want_params)
  for attr in ("name", "host_scored", "summary_keys", "progress_labels"):
    assert hasattr(cls, attr), (name, attr)
  assert cls.name == name
  assert isinstance(cls.host_scored, bool)
  assert all(len(pair) == 2 for pair in cls.progress_labels)


def test_every_registered_task_has_a_builder_here():
  assert set(BUILDERS) == set(registry.TASKS)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_built_task_is_an_instance_of_its_protocol(name):
  task = BUILDERS[name]()
  assert isinstance(task, base.Task)
  assert isinstance(task, base.HostScored) == task.host_scored
  assert task.name == name and task.tokenizer_dir is None  # set by prepare()
  assert task.model_config.flops_per_token(16) > 0


def test_a_non_task_is_not_a_task():
  class Half:  # the loop's members without the host-scoring ones, and no model_config
    name, host_scored = "half", True
  assert not isinstance(Half(), base.Task)
  pre = BUILDERS["bert_pretraining"]()
  assert not isinstance(pre, base.HostScored)


def test_train_package_never_imports_tasks():
  for path in (ROOT / "bert_jax" / "train").glob("*.py"):
    text = path.read_text()
    assert "bert_jax.tasks" not in text and "from bert_jax import tasks" not in text, path


def test_predict_mode_refuses_a_task_that_is_not_host_scored(tmp_path):
  c = tiny_config()
  c.mode = "predict"
  with pytest.raises(ValueError, match="host-scored tasks.*not 'bert_pretraining'"):
    registry.run(c, str(tmp_path))


def test_unknown_mode_and_task_are_errors(tmp_path):
  c = tiny_config()
  c.mode = "evaluate"
  with pytest.raises(ValueError, match="config.mode='evaluate'"):
    registry.run(c, str(tmp_path))
  c.mode, c.task = "train", "nope"
  with pytest.raises(ValueError, match="config.task='nope' has no task class"):
    registry.run(c, str(tmp_path))
  assert not os.listdir(tmp_path)
