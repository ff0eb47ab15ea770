"""Every config file and arg builds, names its run command, and builds its task's model."""
import importlib.util
import os

import pytest

from bert_jax.tasks import registry
from bert_jax.tasks.glue import GLUE_TASKS

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "configs", name + ".py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


CASES = ([("bert_tiny", None), ("bert_base", None), ("bert_base", "mlm_only"),
          ("bert_large", None), ("bert_large", "s512"), ("word2vec", None),
          ("finetune_classification", None),
          ("finetune_classification", "file"), ("finetune_ner", None), ("finetune_ner", "file"),
          ("finetune_squad", None), ("finetune_squad", "v2.0"), ("finetune_squad", "file")]
         + [("finetune_classification", t) for t in sorted(GLUE_TASKS)])


@pytest.mark.parametrize("name,arg", CASES)
def test_config_builds_and_documents_its_command(name, arg):
  module = load(name)
  config = module.get_config(arg)
  assert f"configs/{name}.py" in module.__doc__ and "bert_jax.main" in module.__doc__
  assert config.task in registry.TASKS or config.task in registry.TRAINERS
  config.lock()
  with pytest.raises(AttributeError):
    config.train.no_such_field = 1  # a misspelled override cannot slip through


def test_unknown_finetune_args_are_errors():
  for name in ("finetune_classification", "finetune_ner", "finetune_squad"):
    with pytest.raises(ValueError, match="unknown arg"):
      load(name).get_config("nope")


def test_polarity_config_builds_its_task_offline():
  config = load("finetune_classification").get_config("polarity")
  task = registry.get_task(config)  # the packaged all-MiniLM-L6-v2: no network
  assert task.model_config.hidden_size == 384 and task.model_config.num_layers == 6
  assert task.label_list == ("neg", "pos") and task.seq_len == 64
