"""Fine-tuning end to end: one real training run per task under tfds.testing.mock_data,
init_from an HF checkpoint, evaluation with the official metrics, best checkpoint,
predict mode. The encoder is the committed tiny HF BERT (tests/testdata/hf/tiny_bert:
2 layers, 32 wide, 122-token vocab), on the 8 fake devices.
"""
import json
import os

import jax
import numpy as np
import pytest

from bert_jax.configs import finetune_classification, finetune_ner, finetune_squad
from bert_jax.interop import hf_load
from bert_jax.tasks import registry
from bert_jax.train import loop
from bert_jax.train.defaults import finetune_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TINY_BERT = os.path.join(ROOT, "tests", "testdata", "hf", "tiny_bert")
CTX = ("Shanghai is a City in China, it is also a financial center, its fashion capital "
       "and industrial city.")


def tiny(task, source, metric, **data):
  """Padded rows unless packing=True (then batch_size counts packed rows)."""
  data.setdefault("packing", False)
  c = finetune_config(task, source, metric, max_seq_length=32, **data)
  c.init_from = TINY_BERT
  c.train.update(batch_size=8, num_epochs=1.0, learning_rate=1e-3, log_every=1,
                 async_checkpoints=False)
  return c


@pytest.fixture
def csv_files(tmp_path):
  """16 train rows, 8 eval rows plus one whose label is outside the label set."""
  rows = [("a fine, funny film", "pos"), ("dull and tedious", "neg")] * 8
  train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
  train.write_text("sentence,label\n" + "".join(f'"{t}",{l}\n' for t, l in rows))
  dev.write_text("sentence,label\n" + "".join(f'"{t}",{l}\n' for t, l in rows[:8])
                 + "so so,neutral\n")
  return str(train), str(dev)


def _count_param_reads(monkeypatch) -> list:
  """The paths whose weights (not only config/tokenizer) are read from now on."""
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoint import pretrained
  reads = []
  load_encoder, load_ckpt = pretrained.load_encoder, checkpoint.load_params_for_inference

  def counted_encoder(path, *, with_params=True):
    if with_params:
      reads.append(path)
    return load_encoder(path, with_params=with_params)

  def counted_ckpt(path, with_params=True, return_meta=False):
    if with_params:
      reads.append(path)
    return load_ckpt(path, with_params=with_params, return_meta=return_meta)

  monkeypatch.setattr(pretrained, "load_encoder", counted_encoder)
  monkeypatch.setattr(checkpoint, "load_params_for_inference", counted_ckpt)
  return reads


def _records(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_init_from_hf_puts_the_pretrained_encoder_under_bert(csv_files, tmp_path):
  c = tiny("classification", "file", "accuracy", train_file=csv_files[0],
           eval_file=csv_files[1])
  task = registry.get_task(c)
  task.prepare(str(tmp_path))
  batch = task.dummy_batch(8, 32)
  params = jax.jit(task.init)(jax.random.key(0), batch)["params"]  # one compile, not eager
  params = jax.tree_util.tree_map(lambda x: x.value if hasattr(x, "value") else x, params,
                                  is_leaf=lambda x: hasattr(x, "value"))
  loaded = task.load_pretrained_params(c.init_from, params)
  _, want = hf_load.load_hf_bert(TINY_BERT, model="encoder")
  for path, leaf in jax.tree_util.tree_flatten_with_path(want)[0]:
    got = loaded["bert"]
    for k in path:
      got = got[k.key]
    np.testing.assert_array_equal(np.asarray(got), leaf)
  # The head is the fresh one, and the labels come from the file, in sorted order.
  np.testing.assert_array_equal(loaded["classifier"]["kernel"], params["classifier"]["kernel"])
  assert task.label_list == ("neg", "pos") and task.num_labels == 2


def test_init_from_takes_the_configs_numerics_and_the_checkpoints_sizes(csv_files):
  """With init_from the checkpoint gives the architecture, the fine-tuning config the
  run's numerics: `--config.model.matmul_dtype=bfloat16` was silently dropped before."""
  c = tiny("classification", "file", "accuracy", train_file=csv_files[0],
           eval_file=csv_files[1])
  c.model.update(matmul_dtype="bfloat16", dtype="bfloat16", dropout_rate=0.2,
                 attention_dropout_rate=0.0, hidden_size=768, num_layers=12)
  cfg = registry.get_task(c).model_config
  assert (cfg.matmul_dtype, cfg.dtype, cfg.dropout_rate, cfg.attention_dropout_rate) == (
      "bfloat16", "bfloat16", 0.2, 0.0)
  assert (cfg.hidden_size, cfg.num_layers) == (32, 2)  # tiny_bert's, not the config's
  c.model.matmul_dtype = None  # unset: the compute dtype, as before
  assert registry.get_task(c).model_config.matmul_dtype is None


def test_classification_file_trains_keeps_best_and_predicts(csv_files, tmp_path, monkeypatch,
                                                            capsys):
  # Packed rows (the default of the fine-tuning configs): the 16 sentences of 13 and 17
  # tokens fill 8 rows of 32, two a row, so a step of 8 rows is an epoch.
  c = tiny("classification", "file", "accuracy", train_file=csv_files[0],
           eval_file=csv_files[1], labels="neg,pos", packing=True)
  c.train.num_epochs = 2.0
  c.train.class_weights = "inverse_frequency"
  c.train.focal_gamma = 2.0
  c.train.layerwise_lr_decay = 0.8
  result = loop.train_and_evaluate(c, str(tmp_path), registry.get_task(c))
  assert result["step"] == 2  # 16 examples in 8 rows, batch 8 rows: 1 step per epoch
  for key in ("eval/accuracy", "eval/macro_f1", "eval/precision/pos", "eval/recall/neg"):
    assert 0.0 <= result[key] <= 1.0, key
  evals = [r for r in _records(tmp_path) if "eval/accuracy" in r]
  assert [r["step"] for r in evals] == [1, 2]  # once per epoch
  # keep_checkpoints=1 plus the best by eval accuracy: the latest and a best one stay.
  kept = {int(n) for n in os.listdir(tmp_path / "checkpoints") if n.isdigit()}
  acc = {r["step"]: r["eval/accuracy"] for r in evals}
  assert 2 in kept and kept <= {1, 2} and max(acc[s] for s in kept) == max(acc.values())
  assert np.isfinite(result["train/loss"])
  assert os.path.exists(os.path.join(tmp_path, "tokenizer", "tokenizer.json"))
  out = capsys.readouterr().out
  # No datasheet peak for a CPU: the log names the measured one MFU divides by.
  assert "measured float32 matmul (no datasheet figure for device_kind 'cpu')" in out
  # Each evaluation: the headline on the step line, then one table row per class.
  report = out[out.index("eval @ 2: "):].splitlines()
  assert report[0].startswith("eval @ 2: accuracy ") and "precision" not in report[0]
  assert report[1].split() == ["class", "precision", "recall", "f1", "support"]
  assert [r.split()[0] for r in report[2:4]] == ["neg", "pos"]
  assert [float(r.split()[1]) for r in report[2:4]] == pytest.approx(
      [result["eval/precision/neg"], result["eval/precision/pos"]], abs=5e-5)
  assert sum(int(r.split()[4]) for r in report[2:4]) == 8  # the 8 kept eval rows

  inputs = tmp_path / "in.csv"
  inputs.write_text('sentence\n"A fine, funny film."\n""\nDull.\n', encoding="utf-8")
  c.mode = "predict"
  c.predict.input_file = str(inputs)
  reads = _count_param_reads(monkeypatch)
  out = registry.run(c, str(tmp_path))
  assert len(reads) == 1, reads  # the trained weights, read once (the task reads only meta)
  rows = [json.loads(line) for line in open(out, encoding="utf-8")]
  assert [r["text_a"] for r in rows] == ["A fine, funny film.", "Dull."]  # empty: skipped
  for r in rows:
    assert r["label"] in ("neg", "pos")
    assert abs(sum(r["probabilities"].values()) - 1.0) < 1e-5
  # The head is the workdir's: another pooling on the command line is not applied (the
  # log names the run's), so the trained [CLS] pooler predicts as before.
  capsys.readouterr()
  c.pooling = "mean"
  c.predict.output_file = str(tmp_path / "mean.jsonl")
  again = [json.loads(line) for line in open(registry.run(c, str(tmp_path)), encoding="utf-8")]
  assert "pooling='cls'" in capsys.readouterr().out
  assert [r["probabilities"] for r in again] == [r["probabilities"] for r in rows]
  # A head that differs from the trained one (a labels.json edited since) is named, not
  # silently applied.
  from bert_jax.checkpoint.manager import CheckpointMismatchError  # pylint: disable=g-import-not-at-top
  (tmp_path / "labels.json").write_text('{"labels": ["neg", "pos", "neutral"]}')
  with pytest.raises(CheckpointMismatchError,
                     match=r"(?s)classifier.*\(predict builds the head"):
    registry.run(c, str(tmp_path))


@pytest.fixture(name="tfds")
def _tfds():
  """tensorflow_datasets, or a skip of this one test when TensorFlow is not installed."""
  pytest.importorskip("tensorflow")
  return pytest.importorskip("tensorflow_datasets")


def records_mock(records):
  from tests.tasks.finetune.test_tfds import records_mock as mock  # pylint: disable=g-import-not-at-top
  return mock(records)


def predict_without_tfds(monkeypatch, config_module, arg, workdir, input_file):
  """The rows predict mode writes for `input_file` with only the workdir and the config
  file's defaults (no tfds mock); any tfds read fails the test: the labels and settings
  are the workdir's, the training data is not read again."""
  from bert_jax.tasks.finetune import tfds as tfds_lib  # pylint: disable=g-import-not-at-top

  def refuse(*args, **kwargs):
    raise AssertionError(f"predict read tfds: {args} {kwargs}")
  monkeypatch.setattr(tfds_lib, "load", refuse)
  c = config_module.get_config(arg)
  c.mode, c.predict.input_file = "predict", str(input_file)
  with open(registry.run(c, str(workdir)), encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_glue_sst2_one_real_training_run_under_mock_data(tmp_path, tfds, monkeypatch):
  c = tiny("classification", "glue/sst2", "accuracy")
  with tfds.testing.mock_data(num_examples=16):
    result = loop.train_and_evaluate(c, str(tmp_path), registry.get_task(c))
  assert result["step"] == 2 and np.isfinite(result["train/loss"])
  assert 0.0 <= result["eval/accuracy"] <= 1.0
  texts = tmp_path / "texts.csv"
  texts.write_text("sentence\nA fine film.\n", encoding="utf-8")
  rows = predict_without_tfds(monkeypatch, finetune_classification, "sst2", tmp_path, texts)
  assert [r["text_a"] for r in rows] == ["A fine film."]
  assert list(rows[0]["probabilities"]) == ["negative", "positive"]  # GLUE's names
  assert rows[0]["label"] in ("negative", "positive")


def test_conll2003_one_real_training_run_under_mock_data(tmp_path, tfds, monkeypatch):
  del tfds  # records_mock uses it
  from bert_jax.tasks.finetune.ner.data import CONLL2003_NER_TAGS as tags
  sentences = [(["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
               (["Peter", "Blackburn"], ["B-PER", "I-PER"])] * 4
  records = [{"tokens": w, "pos": [0] * len(w), "chunks": [0] * len(w),
              "ner": [tags.index(t) for t in t_]} for w, t_ in sentences]
  c = tiny("ner", "conll2003", "f1", eval_split="dev")
  with records_mock(records):
    result = loop.train_and_evaluate(c, str(tmp_path), registry.get_task(c))
  assert result["step"] == 1 and np.isfinite(result["train/loss"])
  assert 0.0 <= result["eval/f1"] <= 1.0 and 0.0 <= result["eval/precision"] <= 1.0
  texts = tmp_path / "texts.txt"  # plain text: one sentence a line, split on whitespace
  texts.write_text("EU rejects German call\nPeter Blackburn\n", encoding="utf-8")
  rows = predict_without_tfds(monkeypatch, finetune_ner, "conll2003", tmp_path, texts)
  assert [r["tokens"] for r in rows] == [["EU", "rejects", "German", "call"],
                                         ["Peter", "Blackburn"]]
  assert [len(r["tags"]) for r in rows] == [4, 2]  # a tag per word
  assert all(t in tags for r in rows for t in r["tags"])


def test_squad_one_real_training_run_under_mock_data(tmp_path, tfds, monkeypatch):
  del tfds  # records_mock uses it
  records = [
      {"id": f"q{i}", "title": "Shanghai", "context": CTX,
       "question": "What is the fashion capital of China?",
       "answers": {"text": ["Shanghai"], "answer_start": [0]}} for i in range(8)]
  c = tiny("squad", "squad/v1.1", "f1", doc_stride=8, max_query_length=12)
  with records_mock(records):
    task = registry.get_task(c)
    task.prepare(str(tmp_path / "probe"))
    result = loop.train_and_evaluate(c, str(tmp_path / "run"), registry.get_task(c))
  windows = task.train_features["example_index"]
  assert len(windows) > len(records)  # the 32-token rows split each context (doc stride)
  assert result["step"] == -(-len(windows) // 8)  # one epoch of windows, batch 8
  assert np.isfinite(result["train/loss"])
  assert 0.0 <= result["eval/exact_match"] <= 100.0 and 0.0 <= result["eval/f1"] <= 100.0
  # New questions, without answers; the config's 384-token windows would not fit the
  # tiny model's 64 positions: the run's 32 (doc stride 8) come from the workdir.
  questions = tmp_path / "questions.json"
  questions.write_text(json.dumps({"data": [{"title": "Shanghai", "paragraphs": [
      {"context": CTX, "qas": [{"id": "new1", "question": "Which city is in China?"}]}]}]}))
  rows = predict_without_tfds(monkeypatch, finetune_squad, "v1.1", tmp_path / "run",
                              questions)
  assert [r["id"] for r in rows] == ["new1"] and isinstance(rows[0]["answer"], str)
  assert 1 <= len(rows[0]["nbest"]) <= 5
  assert all(sorted(n) == ["probability", "text"] for n in rows[0]["nbest"])
  official = json.loads((tmp_path / "run" / "predictions.json").read_text())
  assert official == {"new1": rows[0]["answer"]}


def test_interrupted_fine_tuning_resumes_exactly(csv_files, tmp_path, monkeypatch):
  """SIGTERM mid-epoch, rerun: the same losses as an uninterrupted run (data order, dropout
  rng and optimizer state all restored), on packed rows: the packer's state is restored."""
  import signal  # pylint: disable=g-import-not-at-top
  from bert_jax.train import writer as writer_lib  # pylint: disable=g-import-not-at-top
  c = tiny("classification", "file", "accuracy", train_file=csv_files[0],
           eval_file=csv_files[1], labels="neg,pos", packing=True)
  c.train.num_epochs = 6.0  # 6 steps of 8 rows, two sentences a row (16 examples)
  loop.train_and_evaluate(c, str(tmp_path / "whole"), registry.get_task(c))

  write = writer_lib.MetricWriter.write_scalars

  def write_then_preempt(self, step, scalars):
    write(self, step, scalars)
    if step == 3 and "train/loss" in scalars:
      os.kill(os.getpid(), signal.SIGTERM)  # the loop saves step 3 and stops

  monkeypatch.setattr(writer_lib.MetricWriter, "write_scalars", write_then_preempt)
  reads = _count_param_reads(monkeypatch)
  # The interrupted run also logs to Weights & Biases (offline: nothing leaves the machine).
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  c.wandb.project = "bert_jax_test"
  first = loop.train_and_evaluate(c, str(tmp_path / "cut"), registry.get_task(c))
  assert first["preempted"] and first["step"] == 3
  assert reads == [TINY_BERT]  # the fresh run starts from init_from's encoder
  monkeypatch.setattr(writer_lib.MetricWriter, "write_scalars", write)
  loop.train_and_evaluate(c, str(tmp_path / "cut"), registry.get_task(c))
  assert reads == [TINY_BERT]  # the resumed run restores its own checkpoint only

  def losses(d):
    return {r["step"]: r["train/loss"] for r in _records(d) if "train/loss" in r}
  whole, cut = losses(tmp_path / "whole"), losses(tmp_path / "cut")
  # One W&B run id, kept in the workdir: the rerun continued the interrupted W&B run.
  run_id = (tmp_path / "cut" / "wandb_run_id").read_text().strip()
  offline = sorted(p.name for p in (tmp_path / "cut" / "wandb").glob("offline-run-*"))
  assert len(offline) == 2 and all(n.endswith(f"-{run_id}") for n in offline), offline
  # Each step logged once: the rerun resumed at step 4 rather than starting over.
  assert [r["step"] for r in _records(tmp_path / "cut") if "train/loss" in r] == [
      1, 2, 3, 4, 5, 6]
  for step in range(1, 7):
    assert abs(cut[step] - whole[step]) <= 1e-6, (step, cut[step], whole[step])
