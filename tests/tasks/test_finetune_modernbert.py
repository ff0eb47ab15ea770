"""Fine-tuning a ModernBERT (tasks/finetune/modernbert.py): init_from the committed tiny
transformers ModernBertForMaskedLM directory (tests/testdata/hf/modernbert_tiny: 4 layers,
32 wide, a 128-token byte-level BPE), classification and NER for a few steps, the export
read back by our loader, packed rows against padded ones, SQuAD's refusal.
"""
import json
import os

import jax
import numpy as np
import pytest

from bert_jax.apps import export
from bert_jax.checkpoint import manager as checkpoint
from bert_jax.interop import modernbert as mb
from bert_jax.models.modernbert import ModernBertForSequenceClassification
from bert_jax.models.modernbert import ModernBertForTokenClassification
from bert_jax.tasks import registry
from bert_jax.tasks.finetune import packing
from bert_jax.train import loop
from bert_jax.train.defaults import finetune_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(ROOT, "tests", "testdata", "hf", "modernbert_tiny")
NER_LABELS = "O,B-PER,I-PER,B-LOC"


def tiny(task, source, metric, **data):
  data.setdefault("packing", False)
  c = finetune_config(task, source, metric, max_seq_length=32, **data)
  c.init_from = TINY
  c.train.update(batch_size=8, num_epochs=4.0, learning_rate=3e-3, warmup_steps=0,
                 log_every=1, async_checkpoints=False)
  return c


@pytest.fixture(scope="module")
def cls_files(tmp_path_factory):
  """16 train rows of two separable sentences, 8 eval rows."""
  d = tmp_path_factory.mktemp("cls")
  rows = [("a fine, funny film", "pos"), ("dull and tedious", "neg")] * 8
  body = "".join(f'"{t}",{l}\n' for t, l in rows)
  (d / "train.csv").write_text("sentence,label\n" + body)
  (d / "dev.csv").write_text("sentence,label\n" + "".join(f'"{t}",{l}\n' for t, l in rows[:8]))
  return str(d / "train.csv"), str(d / "dev.csv")


@pytest.fixture(scope="module")
def ner_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("ner") / "ner.jsonl"
  sentences = [(["Peter", "visits", "Paris"], ["B-PER", "O", "B-LOC"]),
               (["Ann", "Lee", "is", "here"], ["B-PER", "I-PER", "O", "O"])] * 4
  path.write_text("".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in sentences))
  return str(path)


def _plain(tree):
  return jax.tree_util.tree_map(lambda x: x.value if hasattr(x, "value") else x, tree,
                                is_leaf=lambda x: hasattr(x, "value"))


def _template(task):
  batch = task.dummy_batch(8, task.seq_len)
  return _plain(jax.jit(task.init)(jax.random.key(0), batch)["params"])


def _assert_tree_equal(got, want):
  flat_want = dict(jax.tree_util.tree_flatten_with_path(want)[0])
  flat_got = dict(jax.tree_util.tree_flatten_with_path(got)[0])
  assert flat_got.keys() == flat_want.keys()
  for path, leaf in flat_want.items():
    np.testing.assert_array_equal(np.asarray(flat_got[path]), leaf, err_msg=str(path))


def with_data(c, **data):
  """A copy of config `c` with other data fields (e.g. packing=False)."""
  c = c.copy_and_resolve_references()
  c.data.update(data)
  return c


def _train_losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r["train/loss"] for r in map(json.loads, f) if "train/loss" in r]


def test_features_are_the_dirs_bpe_layout_and_segment_ids_are_ignored(cls_files, tmp_path):
  c = tiny("classification", "file", "accuracy", train_file=cls_files[0],
           eval_file=cls_files[1], text_b_key="sentence")  # a pair: the text twice
  c.data.max_seq_length = 64  # the pair untruncated (16 + 11 tokens a text)
  task = registry.get_task(c)
  assert task.model_config.family == "modernbert"
  assert isinstance(task.model, ModernBertForSequenceClassification)
  task.prepare(str(tmp_path))
  tok = mb.load_tokenizer(TINY)
  f = task.train_features
  n = int(f["input_mask"][0].sum())
  text = "a fine, funny film" if f["labels"][0] == task.label_list.index("pos") else \
      "dull and tedious"
  # The directory's own template: [CLS]=1 a [SEP]=2 a [SEP]=2.
  assert f["input_ids"][0, :n].tolist() == tok.encode(text, text).ids
  assert (f["input_ids"][0, 0], f["input_ids"][0, n - 1]) == (1, 2)
  assert f["input_ids"][0, n:].tolist() == [3] * (64 - n)  # its [PAD]
  batch = task.dummy_batch(8, 64)
  params = _template(task)
  out = task.apply(params, batch, None, train=False)["logits"]
  other = dict(batch, segment_ids=1 - batch["segment_ids"])
  np.testing.assert_array_equal(task.apply(params, other, None, train=False)["logits"], out)


def test_ner_words_split_as_in_the_sentence(ner_file, tmp_path):
  c = tiny("ner", "file", "f1", train_file=ner_file, eval_file=ner_file, labels=NER_LABELS)
  task = registry.get_task(c)
  task.prepare(str(tmp_path))
  f, tok = task.train_features, mb.load_tokenizer(TINY)
  n = int(f["input_mask"][0].sum())
  words = task.train_examples[f["example_index"][0]].words
  want = tok.encode(" ".join(words), add_special_tokens=False).ids
  assert f["input_ids"][0, :n].tolist() == [1] + want + [2]
  assert f["label_weights"][0].sum() == len(words)  # one label a word


def _exported_logits(out, kind, module, num_labels, batch):
  """Logits of the exported directory, read back by our loader (interop/modernbert.py)."""
  cfg, loaded = mb.load_modernbert(out, model=kind, deterministic=True)
  return cfg, module(cfg, num_labels).apply({"params": loaded}, batch["input_ids"],
                                            batch["input_mask"])["logits"]


@pytest.fixture(scope="module")
def cls_run(cls_files, tmp_path_factory):
  """A classification run of 8 steps (padded rows) from the tiny ModernBERT directory."""
  c = tiny("classification", "file", "accuracy", train_file=cls_files[0],
           eval_file=cls_files[1], labels="neg,pos")
  work = str(tmp_path_factory.mktemp("cls_run") / "run")
  task = registry.get_task(c)
  return c, work, task, loop.train_and_evaluate(c, work, task)


def test_classification_starts_from_the_dirs_encoder_and_head(cls_run):
  c, _, task, _ = cls_run
  template = _template(task)
  start = task.load_pretrained_params(c.init_from, template)
  # The encoder and the prediction head (transformers' classifiers share ForMaskedLM's)
  # are the directory's; the classifier is the fresh one.
  _, mlm = mb.load_modernbert(TINY)
  _assert_tree_equal(start["model"], mlm["model"])
  _assert_tree_equal(start["head"], mlm["head"])
  _assert_tree_equal(start["classifier"], template["classifier"])
  assert set(start) == {"model", "head", "classifier"}


def test_classification_learns_and_its_export_gives_our_logits(cls_run, tmp_path):
  _, work, task, result = cls_run
  losses = _train_losses(work)
  assert result["step"] == 8 and len(losses) == 8  # 16 examples, batch 8, 4 epochs
  assert np.mean(losses[-2:]) < 0.5 * losses[0], losses
  assert result["eval/accuracy"] == 1.0
  out = str(tmp_path / "hf")
  architecture, step_dir = export.export(work, out, "latest")
  assert architecture == "ModernBertForSequenceClassification"
  with open(os.path.join(out, "config.json")) as fh:
    hf = json.load(fh)
  assert hf["id2label"] == {"0": "neg", "1": "pos"} and hf["classifier_pooling"] == "cls"
  assert (hf["cls_token_id"], hf["sep_token_id"], hf["pad_token_id"]) == (1, 2, 3)
  _, params, _ = checkpoint.load_params_for_inference(step_dir)
  batch = {k: v for k, v in task.eval_features.items() if k in task.fields}
  ours = task.apply(params, batch, None, train=False)["logits"]
  _, theirs = _exported_logits(out, "sequence_classification",
                               ModernBertForSequenceClassification, 2, batch)
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
  assert np.abs(ours).max() > 0.1  # a trained classifier, not the zero-bias start


def test_init_from_our_finetuned_modernbert_workdir(cls_run, tmp_path):
  c, work, _, _ = cls_run
  c = tiny("classification", "file", "accuracy", train_file=c.data.train_file,
           eval_file=c.data.eval_file, labels="neg,pos")
  c.init_from = work
  c.data.vocab = os.path.join(work, "tokenizer")  # as predict mode sets it
  task = registry.get_task(c)
  assert task.model_config.family == "modernbert"
  assert task.tokenizer.to_str() == mb.load_tokenizer(TINY).to_str()  # its BPE, as copied
  task.prepare(str(tmp_path))
  start = task.load_pretrained_params(work, _template(task))
  _, saved, _ = checkpoint.load_params_for_inference(work)
  _assert_tree_equal(start["model"], saved["model"])
  _assert_tree_equal(start["head"], saved["head"])


def test_regression_on_packed_rows_with_mean_pooling_exports(tmp_path):
  rows = [("a fine, funny film", 1.0), ("dull and tedious", 0.0)] * 8
  path = tmp_path / "scores.csv"
  path.write_text("sentence,label\n" + "".join(f'"{t}",{v}\n' for t, v in rows))
  c = tiny("classification", "file", "pearson", train_file=str(path), eval_file=str(path),
           regression=True, packing=True)  # 2 sentences a row of 32
  c.pooling = "mean"
  c.train.num_epochs = 6.0  # 8 rows of 2 sentences: a step of 8 rows an epoch
  task = registry.get_task(c)
  assert task.packing and task.model_config.pooling == "mean"
  work = str(tmp_path / "run")
  result = loop.train_and_evaluate(c, work, task)
  losses = _train_losses(work)
  assert result["step"] == 6 and losses[-1] < losses[0], losses
  out = str(tmp_path / "hf")
  export.export(work, out, "latest")
  with open(os.path.join(out, "config.json")) as fh:
    hf = json.load(fh)
  assert (hf["problem_type"], hf["classifier_pooling"], hf["id2label"]) == (
      "regression", "mean", {"0": "LABEL_0"})
  _, params, _ = checkpoint.load_params_for_inference(work)
  batch = {k: v for k, v in task.eval_features.items() if k in task.fields}
  padded = registry.get_task(with_data(c, packing=False))
  ours = padded.apply(params, batch, None, train=False)["logits"]
  cfg, theirs = _exported_logits(out, "sequence_classification",
                                 ModernBertForSequenceClassification, 1, batch)
  assert cfg.pooling == "mean"
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)


def test_ner_trains_on_packed_rows_and_its_export_gives_our_logits(ner_file, tmp_path):
  c = tiny("ner", "file", "f1", train_file=ner_file, eval_file=ner_file, labels=NER_LABELS,
           packing=True)
  c.train.num_epochs = 6.0  # a step of 8 rows an epoch
  task = registry.get_task(c)
  assert task.packing and isinstance(task.model, ModernBertForTokenClassification)
  work = str(tmp_path / "run")
  loop.train_and_evaluate(c, work, task)
  losses = _train_losses(work)
  assert losses[-1] < losses[0], losses
  out = str(tmp_path / "hf")
  assert export.export(work, out, "latest")[0] == "ModernBertForTokenClassification"
  _, params, _ = checkpoint.load_params_for_inference(work)
  padded = registry.get_task(with_data(c, packing=False))
  padded.prepare(str(tmp_path / "padded"))
  batch = {k: v for k, v in padded.eval_features.items() if k in padded.fields}
  ours = padded.apply(params, batch, None, train=False)["logits"]
  _, theirs = _exported_logits(out, "token_classification", ModernBertForTokenClassification,
                               4, batch)
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind,pooling", [("classification", "cls"),
                                          ("classification", "mean"), ("ner", "cls")])
def test_packed_rows_give_the_padded_logits(kind, pooling, cls_files, ner_file, tmp_path):
  """Each example of a packed row (its own positions, attending to itself) has the
  logits of its padded row: positions restart, segments keep the examples apart."""
  path = ner_file if kind == "ner" else cls_files[0]
  c = tiny(kind, "file", "f1" if kind == "ner" else "accuracy", train_file=path,
           eval_file=path, labels=NER_LABELS if kind == "ner" else "neg,pos", packing=True)
  c.pooling = pooling
  tasks = []
  for packed in (True, False):
    t = registry.get_task(with_data(c, packing=packed))
    t.prepare(str(tmp_path / f"w{packed}"))
    tasks.append(t)
  packed_task, padded_task = tasks
  params = packed_task.load_pretrained_params(TINY, _template(packed_task))
  plan = packed_task.plans["eval"]
  batch = next(packing.eval_iterator(packed_task.eval_features, packed_task.fields, plan,
                                     plan.num_rows, 0, 1))
  got = np.asarray(packed_task.apply(params, batch, None, train=False)["logits"])
  f = padded_task.eval_features
  want = np.asarray(padded_task.apply(params, {k: f[k] for k in padded_task.fields}, None,
                                      train=False)["logits"])
  index, k = batch["feature_index"], len(batch["feature_index"]) // plan.num_rows
  assert (index >= 0).sum() == len(want)
  assert (index.reshape(-1, k) >= 0).sum(axis=1).max() >= 2  # rows do hold several
  for slot in np.flatnonzero(index >= 0):
    fi = index[slot]
    if kind == "ner":  # token logits: the example's tokens from its first one
      n, s = int(f["input_mask"][fi].sum()), batch["example_starts"][slot]
      np.testing.assert_allclose(got[slot // k, s:s + n], want[fi, :n], rtol=0, atol=1e-5)
    else:
      np.testing.assert_allclose(got[slot], want[fi], rtol=0, atol=1e-5)


def test_squad_refuses_a_modernbert_encoder():
  c = finetune_config("squad", "file", "f1", max_seq_length=32)
  c.init_from = TINY
  with pytest.raises(ValueError, match=r"^squad: ModernBERT has no span head"):
    registry.get_task(c)
