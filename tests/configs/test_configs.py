"""Every config file and arg builds, names its run command, and builds its task's model
abstractly (jax.eval_shape of the task's init: shapes only, no FLOPs, no data)."""
import importlib.util
import os

import jax
import jax.numpy as jnp
import pytest

from bert_jax.tasks import registry
from bert_jax.tasks.finetune.classification.glue import GLUE_TASKS

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load(name):
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "configs", name + ".py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


CASES = ([("bert_tiny", None), ("bert_tiny", "demo"), ("bert_base", None),
          ("bert_base", "mlm_only"), ("bert_large", None), ("bert_large", "s512"),
          ("word2vec", None), ("finetune_classification", None),
          ("finetune_classification", "file"), ("finetune_ner", None), ("finetune_ner", "file"),
          ("finetune_squad", None), ("finetune_squad", "v2.0"), ("finetune_squad", "file"),
          ("gpt", None), ("gpt", "small"), ("gpt", "tiny,text"), ("gpt", "small,tfds"),
          ("modernbert", None)]  # base / large: test_modernbert_base_is_the_papers_recipe
         + [("finetune_classification", t) for t in sorted(GLUE_TASKS)]
         + [("translation", a) for a in (None, "numbers_gru", "file",
                                         "ted_hrlr_translate/pt_to_en",
                                         "wmt14_translate/de-en", "transformer/base",
                                         "transformer/big")])


@pytest.mark.parametrize("name,arg", CASES)
def test_config_builds_and_documents_its_command(name, arg):
  module = load(name)
  config = module.get_config(arg)
  assert f"configs/{name}.py" in module.__doc__ and "bert_jax.main" in module.__doc__
  assert config.task in registry.TASKS or config.task in registry.TRAINERS
  config.lock()
  with pytest.raises(AttributeError):
    config.train.no_such_field = 1  # a misspelled override cannot slip through
  params = _abstract_params(config)
  assert jax.tree_util.tree_leaves(params)


def _abstract_params(config):
  """The params tree (ShapeDtypeStructs) of the model the config trains."""
  if config.task in registry.TRAINERS:  # word2vec: the vocabulary comes from the data
    from bert_jax.word2vec.model import SkipGram  # pylint: disable=g-import-not-at-top
    ids = jnp.zeros((1,), jnp.int32)
    return jax.eval_shape(lambda: SkipGram(1000, config.model.embed_dim).init(
        jax.random.key(0), ids, ids[:, None]))["params"]
  if config.data.get("source") == "file" and not config.data.get("labels"):
    config.unlock()
    config.data.labels = "neg,pos"  # else read from data.train_file, which has none here
  task = registry.get_task(config)
  shapes = task.phase_shapes(dict((config.train.get("phases") or [{}])[-1]))
  batch = task.dummy_batch(2, shapes["seq_len"], shapes["num_predictions"])
  return jax.eval_shape(lambda: task.init(jax.random.key(0), batch))["params"]


def test_gpt_small_is_the_gpt2_124m_recipe():
  c = load("gpt").get_config("small")
  task = registry.get_task(c)
  cfg = task.model_config
  assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.vocab_size, cfg.max_len) == (
      12, 768, 12, 50257, 1024)
  assert (c.train.b2, c.train.weight_decay, c.train.schedule, c.train.grad_clip_norm) == (
      0.95, 0.1, "cosine", 1.0)
  assert not c.train.decay_embeddings
  with pytest.raises(ValueError, match="unknown arg"):
    load("gpt").get_config("huge")


def test_unknown_args_are_errors_in_every_config():
  """`configs/X.py:typo` never trains the default silently (bert_base and word2vec did)."""
  names = sorted(n[:-3] for n in os.listdir(os.path.join(ROOT, "configs"))
                 if n.endswith(".py") and not n.startswith("_"))
  assert {"bert_base", "bert_large", "bert_tiny", "word2vec"} <= set(names)
  for name in names:
    with pytest.raises(ValueError, match="unknown arg 'nope'"):
      load(name).get_config("nope")


def test_polarity_config_builds_its_task_offline():
  config = load("finetune_classification").get_config("polarity")
  task = registry.get_task(config)  # the packaged all-MiniLM-L6-v2: no network
  assert task.model_config.hidden_size == 384 and task.model_config.num_layers == 6
  assert task.label_list == ("neg", "pos") and task.seq_len == 64


@pytest.mark.parametrize("name,arg", [c for c in CASES if c[0] != "word2vec"])
def test_every_configs_train_counts_pass_the_loops_check(name, arg):
  from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
  loop.check_counts(load(name).get_config(arg).train)


@pytest.mark.parametrize("name, key, value, expected", [
    ("bert_tiny", "num_steps", 0, "train.num_steps=0; expected a number >= 1."),
    ("bert_tiny", "checkpoint_every", 0, "train.checkpoint_every=0; expected a number >= 1."),
    ("bert_tiny", "log_every", 0, "train.log_every=0; expected a number >= 1."),
    ("bert_tiny", "grad_accum_steps", 0, "train.grad_accum_steps=0; expected a number >= 1."),
    ("bert_tiny", "eval_every", -1, "train.eval_every=-1; expected a number >= 0."),
    ("bert_tiny", "learning_rate", -1.0, "train.learning_rate=-1.0; expected a number > 0."),
    ("finetune_ner", "num_epochs", -1.0, "train.num_epochs=-1.0; expected a number >= 0."),
    ("finetune_ner", "checkpoint_every", -1,
     "train.checkpoint_every=-1; expected a number >= 0."),
])
def test_a_train_count_the_loop_cannot_run_is_one_error(name, key, value, expected):
  """What `--config.train.<key>=<value>` reaches: zero intervals were ZeroDivisionError
  tracebacks, num_steps=0 trained nothing silently, a negative rate climbed the loss."""
  from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
  train = load(name).get_config(None).train
  train[key] = value
  with pytest.raises(ValueError) as info:
    loop.check_counts(train)
  assert str(info.value) == expected


def test_modernbert_base_is_the_papers_recipe():
  assert load("modernbert").get_config("variant=large").model.num_layers == 28
  config = load("modernbert").get_config("base")
  m, t = config.model, config.train
  assert (m.num_layers, m.hidden_size, m.num_heads, m.mlp_dim) == (22, 768, 12, 1152)
  assert (m.local_window, m.global_every, m.vocab_multiple) == (128, 3, 64)
  assert (t.optimizer, t.schedule, config.data.masked_lm_prob) == ("stable_adamw", "wsd", 0.3)
  # Decay fully decoupled from the rate (optimi's decouple_lr): optax's λ·lr_t = 1e-5 at peak.
  assert abs(t.weight_decay * t.learning_rate - 1e-5) < 1e-12
  assert t.warmup_steps * 768 * 1024 == pytest.approx(3e9, rel=1e-3)   # 3B tokens
  phases = [dict(p) for p in t.phases]
  short, extension = phases[:-1], phases[-1]
  assert [p["batch_size"] for p in short] == [768, 1536, 3072, 4608]
  assert {p["rotary_base"] for p in short} == {10_000.0}
  warmup_tokens = sum(p["fraction"] * t.num_steps * p["batch_size"] * 1024 for p in short[:-1])
  assert abs(warmup_tokens - 50e9) / 50e9 < 0.01
  assert (extension["max_seq_length"], extension["rotary_base"]) == (8192, 160_000.0)
  assert extension["batch_size"] * 8192 == 4608 * 1024      # the same tokens a step
  assert abs(sum(p["fraction"] for p in phases) - 1.0) < 1e-9
