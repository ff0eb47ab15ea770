"""The golden-trajectory cases: our real configs and pipelines, shrunk to tiny sizes.

Each case is a task of tasks/registry.py built from the config file a user runs (BERT
pretraining: configs/bert_tiny.py:bert, MLM + NSP; sequence classification:
configs/finetune_classification.py:polarity from tests/testdata/hf/tiny_bert with the
pooled [CLS] head of BertForSequenceClassification; GPT: configs/gpt.py:tiny), with the
model made tiny, dropout off and STEPS steps, and its optimizer section left as the
config file sets it. `write_inputs` (main venv) writes what the reference side needs: the
initial weights (ours, exported by bert_jax/interop into transformers' names), STEPS
batches from our data pipeline and the optimizer settings:

  python -m tests.train.golden_cases OUT_DIR      # scripts/make_golden_fixtures.py runs it

scripts/make_golden_fixtures.py then trains transformers' model on them (reference venv)
and writes tests/testdata/golden/<case>.npz, which tests/train/test_golden.py replays
through our train_step.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile

import flax.linen as nn
import jax
import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HF = os.path.join(ROOT, "tests", "testdata", "hf")
GOLDEN = os.path.join(ROOT, "tests", "testdata", "golden")
TINY_VOCAB = os.path.join(HF, "tiny_bert", "vocab.txt")   # 122 WordPiece tokens, uncased
TINY_BERT = os.path.join(HF, "tiny_bert")                 # random BertForPreTraining, 32 wide
TINY_BPE = os.path.join(HF, "tiny_gpt2")                  # 320-token byte-level BPE
CASES = ("pretraining", "classification", "lm")
# case -> the transformers class the reference side trains
HF_CLASS = {"pretraining": "BertForPreTraining",
            "classification": "BertForSequenceClassification", "lm": "GPT2LMHeadModel"}
STEPS = 30
BATCH = 8
SEQ = 32
# The optimizer fields the reference side reproduces (the fixture records them, and the
# test checks the config still says the same, so a changed recipe asks for a regeneration).
TRAIN_FIELDS = ("learning_rate", "b1", "b2", "eps", "weight_decay", "schedule",
                "warmup_steps", "warmup_fraction", "min_lr_fraction", "grad_clip_norm",
                "decay_embeddings", "layerwise_lr_decay", "optimizer")
# The fine-tuning config has no layer-wise decay (1.0); the golden run turns it on so the
# per-layer learning rates (optim.scale_by_layer_depth) are part of the trajectory.
LAYERWISE_DECAY = 0.8


def _config_file(name: str):
  path = os.path.join(ROOT, "configs", f"{name}.py")
  spec = importlib.util.spec_from_file_location(f"_golden_{name}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def config_of(case: str, data_dir: str | None = None):
  """The run config of a case: its config file's recipe, a tiny model, dropout off."""
  # vocab_multiple=1: the committed inputs and trajectories come from an unpadded init (a
  # table's init draws as many rows as it has); padding is checked against transformers in
  # tests/test_export.py and tests/models/test_vocab_padding.py.
  tiny = dict(num_layers=2, hidden_size=32, num_heads=4, dropout_rate=0.0,
              attention_dropout_rate=0.0, dtype="float32", scan_layers=False,
              vocab_multiple=1)
  if case == "pretraining":
    c = _config_file("bert_tiny").get_config("bert")
    c.model.update(tiny, mlp_dim=64, vocab_size=122, max_len=SEQ)
    c.data.update(vocab_path=TINY_VOCAB, max_seq_length=SEQ, max_predictions_per_seq=5,
                  dupe_factor=1)
  elif case == "classification":
    c = _config_file("finetune_classification").get_config("polarity")
    c.init_from = TINY_BERT       # its architecture (32 wide, 2 layers) and vocab
    c.pooling = "cls"             # BertForSequenceClassification's pooled [CLS]
    c.model.update(dropout_rate=0.0, attention_dropout_rate=0.0, dtype="float32",
                   scan_layers=False)
    c.data.max_seq_length = SEQ
    c.data.packing = False        # one example a row, as transformers' model is fed
    c.train.num_epochs = 0.0      # a fixed number of steps instead
    c.train.layerwise_lr_decay = LAYERWISE_DECAY
  elif case == "lm":
    c = _config_file("gpt").get_config("tiny")
    c.unlock()
    c.model.update(tiny, mlp_dim=128, vocab_size=320, max_len=SEQ)
    c.data.update(vocab_path=TINY_BPE, max_seq_length=SEQ)
  else:
    raise ValueError(f"unknown case {case!r}; expected one of {CASES}")
  c.train.update(batch_size=BATCH, num_steps=STEPS, log_every=1, eval_every=0)
  if case != "classification":  # pretraining / LM warmups are in steps: 10% of the run
    c.train.warmup_steps = STEPS // 10
  if data_dir and "data_dir" in c.data:
    c.data.data_dir = data_dir
  return c


def train_settings(config) -> dict:
  """The optimizer settings of the config's train section (TRAIN_FIELDS), JSON-able."""
  tc = config.train
  out = {k: tc.get(k) for k in TRAIN_FIELDS}
  out["decay_embeddings"] = bool(tc.get("decay_embeddings", True))
  out["layerwise_lr_decay"] = float(tc.get("layerwise_lr_decay", 1.0))
  out["min_lr_fraction"] = float(tc.get("min_lr_fraction", 0.0) or 0.0)
  out["warmup_fraction"] = float(tc.get("warmup_fraction", 0.0) or 0.0)
  out["total_steps"] = STEPS
  return out


def task_of(case: str, config):
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  del case
  return registry.get_task(config)


def to_hf(case: str, task, params) -> dict[str, np.ndarray]:
  """Our params -> the transformers model's tensors (bert_jax/interop)."""
  from bert_jax.interop import gpt2, hf_save  # pylint: disable=g-import-not-at-top
  params = jax.tree_util.tree_map(np.asarray, jax.device_get(nn.unbox(params)))
  if case == "lm":
    return gpt2.params_to_gpt2(task.model_config, params)
  model = "pretraining" if case == "pretraining" else "sequence_classification"
  return hf_save.params_to_hf(task.model_config, params, model)[0]


def from_hf(case: str, task, tensors: dict[str, np.ndarray]):
  """The transformers model's tensors -> our params (the inverse of to_hf)."""
  from bert_jax.interop import gpt2, hf_load  # pylint: disable=g-import-not-at-top
  from bert_jax.interop import hf_layout as layout  # pylint: disable=g-import-not-at-top
  if case == "lm":
    return gpt2.gpt2_to_params(tensors, task.model_config)
  if case == "pretraining":
    return hf_load.hf_to_params(tensors, task.model_config, model="pretraining")
  # hf_to_params reads pretraining / encoder trees only: the head model's name table
  # (the one params_to_hf wrote with) read backwards.
  model = "sequence_classification"
  expected = layout.expected_shapes(task.model_config, model, task.num_labels)
  table = layout.hf_name_table(task.model_config, model)
  assert set(tensors) == {hf_name for hf_name, _ in table.values()}, sorted(tensors)
  return layout.unflatten({path: layout.to_ours(kind, tensors[hf_name], expected[path])
                           for path, (hf_name, kind) in table.items()})


def hf_config(case: str, task) -> dict:
  from bert_jax.interop import gpt2, hf_config  # pylint: disable=g-import-not-at-top
  if case == "lm":
    return gpt2.gpt2_config_dict(task.model_config)
  out = hf_config.hf_config_dict(task.model_config, [HF_CLASS[case]])
  if case == "classification":
    out["num_labels"] = task.num_labels
  return out


def initial_params(task, workdir: str, config):
  """The params the loop starts from: a fresh init (same seed and split as
  train/loop.abstract_state), and for fine-tuning the pretrained encoder put in."""
  params_key, _ = jax.random.split(jax.random.key(config.seed))
  dummy = task.dummy_batch(BATCH, **task.phase_shapes({}))
  params = nn.unbox(task.init(params_key, dummy)["params"])
  if config.get("init_from"):
    params = task.load_pretrained_params(config.init_from, params)
  del workdir
  return jax.tree_util.tree_map(np.asarray, jax.device_get(params))


def pipeline_batches(task, config) -> dict[str, np.ndarray]:
  """STEPS train batches of our data pipeline, stacked: key -> [STEPS, BATCH, ...]."""
  it = task.train_iterator({}, BATCH, 0, 1, config.seed)
  rows = [next(it) for _ in range(STEPS)]
  return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def write_inputs(out_dir: str) -> None:
  """Per case: <case>_inputs.npz (batch/<key>, init/<hf name>) and <case>_inputs.json."""
  os.makedirs(out_dir, exist_ok=True)
  data_dir = tempfile.mkdtemp(prefix="golden_data_")
  for case in CASES:
    config = config_of(case, data_dir)
    task = task_of(case, config)
    workdir = tempfile.mkdtemp(prefix=f"golden_{case}_")
    task.prepare(workdir)
    params = initial_params(task, workdir, config)
    batches = pipeline_batches(task, config)
    arrays = {f"batch/{k}": v for k, v in batches.items()}
    arrays.update({f"init/{k}": v for k, v in to_hf(case, task, params).items()})
    np.savez(os.path.join(out_dir, f"{case}_inputs.npz"), **arrays)
    meta = {"case": case, "hf_class": HF_CLASS[case], "hf_config": hf_config(case, task),
            "train": train_settings(config), "steps": STEPS}
    with open(os.path.join(out_dir, f"{case}_inputs.json"), "w", encoding="utf-8") as f:
      json.dump(meta, f, indent=1)
    print(f"{case}: {len(arrays)} arrays, batch keys {sorted(batches)}")


if __name__ == "__main__":
  jax.config.update("jax_default_matmul_precision", "highest")
  write_inputs(sys.argv[1])
