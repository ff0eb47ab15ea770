"""bert_jax/apps/export.py: each head's export is what transformers computes with our numbers.

The references (tests/testdata/hf/export/) are transformers' own outputs: its
AutoModelFor... class loaded the export of the same tiny workdir (tests/export_cases.py)
with no missing or unexpected weight, and AutoTokenizer loaded its tokenizer
(scripts/make_hf_fixtures.py --only export). Here the workdir is rebuilt, exported again
and compared tensor for tensor with the committed export, and our eval-mode logits with
transformers' to 1e-4.
"""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file

from bert_jax import export
from bert_jax import main
from tests import export_cases
from tests.export_cases import CASES, EXPORT, ROOT

REFERENCE = dict(np.load(os.path.join(EXPORT, "reference.npz")))
with open(os.path.join(EXPORT, "tokenizer_ids.json"), encoding="utf-8") as _f:
  TOKEN_IDS = json.load(_f)
BERT_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json",
              "tokenizer_config.json")
GPT_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def _json(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def _real(head: str) -> np.ndarray:
  """[batch, len] bool: the positions holding real tokens in the case's batch."""
  if head == "lm":
    return export_cases.gpt_batch()["segment_ids"] > 0
  return export_cases.bert_batch()["input_mask"] > 0


@pytest.mark.parametrize("head", list(CASES))
def test_export_equals_transformers(head, tmp_path):
  workdir, out = str(tmp_path / "workdir"), str(tmp_path / "hf")
  task, params = export_cases.make_workdir(head, workdir)
  architecture, step_dir = export.export(workdir, out, "latest")
  assert architecture == CASES[head][1] and step_dir.endswith(os.path.join("checkpoints", "1"))

  # The very tensors, config and tokenizer transformers loaded for the reference.
  committed = os.path.join(EXPORT, head)
  files = GPT_FILES if head == "lm" else BERT_FILES
  assert sorted(os.listdir(out)) == sorted(files)
  got, want = load_file(os.path.join(out, "model.safetensors")), load_file(
      os.path.join(committed, "model.safetensors"))
  assert sorted(got) == sorted(want)
  for name, value in want.items():
    np.testing.assert_array_equal(got[name], value, err_msg=name)
  for name in files[2:] + ("config.json",):
    with open(os.path.join(out, name), "rb") as a, open(os.path.join(committed, name), "rb") as b:
      assert a.read() == b.read(), name

  config = _json(os.path.join(out, "config.json"))
  assert config["architectures"] == [CASES[head][1]]
  if head in ("classification", "ner"):
    labels = export_cases.LABELS[head]
    assert config["id2label"] == {str(i): n for i, n in enumerate(labels)}
    assert config["label2id"] == {n: i for i, n in enumerate(labels)}
  if head in ("classification", "regression"):
    assert config["problem_type"] == {"classification": "single_label_classification",
                                      "regression": "regression"}[head]
  if head == "regression":
    assert config["id2label"] == {"0": "LABEL_0"}

  real = _real(head)
  ours = export_cases.our_outputs(head, task, params)
  assert sorted(ours) == sorted(k.split("/")[1] for k in REFERENCE if k.startswith(head + "/"))
  for name, value in ours.items():
    ref = REFERENCE[f"{head}/{name}"]
    assert value.shape == ref.shape, name
    if value.ndim >= 2 and value.shape[:2] == real.shape:  # per token: the real ones
      value, ref = value[real], ref[real]
    assert np.abs(ref).max() > 0.1  # not all ~0: a wrong weight would show
    np.testing.assert_allclose(value, ref, atol=1e-4, rtol=0, err_msg=name)

  # AutoTokenizer of the export gives our tokenizer's ids.
  case = TOKEN_IDS[head]
  assert export_cases.our_ids(head, task, case["text"]) == case["ids"], case["tokenizer"]
  assert case["model_max_length"] == task.model_config.max_len  # truncation at our positions


def test_best_latest_and_a_step(tmp_path):
  workdir = str(tmp_path / "w")
  # Step 1 scores best: it holds the case's params, step 2 half of them.
  export_cases.make_workdir("classification", workdir,
                            steps=((1, {"accuracy": 0.9}), (2, {"accuracy": 0.5})))
  committed = load_file(os.path.join(EXPORT, "classification", "model.safetensors"))
  for which, scale in (("best", 1.0), ("latest", 0.5), ("1", 1.0), ("2", 0.5)):
    out = str(tmp_path / which)
    _, step_dir = export.export(workdir, out, which)
    assert step_dir.endswith(str(1 if scale == 1.0 else 2))
    got = load_file(os.path.join(out, "model.safetensors"))
    np.testing.assert_array_equal(got["classifier.weight"],
                                  committed["classifier.weight"] * np.float32(scale), which)
  with pytest.raises(export.ExportError, match=r"--checkpoint 7: .* has steps \[1, 2\]"):
    export.export(workdir, str(tmp_path / "x"), "7")
  with pytest.raises(export.ExportError, match="best, latest or a step number"):
    export.export(workdir, str(tmp_path / "x"), "newest")
  assert not os.path.exists(tmp_path / "x")
  notes = tmp_path / "notes"
  notes.mkdir()
  (notes / "keep.txt").write_text("mine")
  with pytest.raises(export.ExportError, match=r"holds files an export does not write "
                                               r"\(keep\.txt\)"):
    export.export(workdir, str(notes), "best", overwrite=True)
  assert os.listdir(notes) == ["keep.txt"]
  with pytest.raises(export.ExportError) as info:  # was a FileExistsError traceback
    export.export(workdir, str(notes / "keep.txt"), "best")
  assert str(info.value) == (f"--output {notes}/keep.txt is a file: give a directory (new, "
                             "empty, or an earlier export with --overwrite).")
  assert (notes / "keep.txt").read_text() == "mine"


def _digests(directory) -> dict:
  return {n: hashlib.sha256(open(os.path.join(directory, n), "rb").read()).hexdigest()
          for n in sorted(os.listdir(directory))}


def test_a_model_is_replaced_only_with_overwrite_and_never_left_half_written(tmp_path,
                                                                             monkeypatch):
  workdir = str(tmp_path / "run")
  export_cases.make_workdir("classification", workdir,
                            steps=((1, {"accuracy": 0.9}), (2, {"accuracy": 0.5})))
  out = str(tmp_path / "hf")
  export.export(workdir, out, "1")
  first = _digests(out)
  with pytest.raises(export.ExportError, match=r"already holds a model \(config\.json\): "
                                               r"pass --overwrite"):
    export.export(workdir, out, "2")
  assert _digests(out) == first
  for into in (workdir, str(tmp_path)):  # the workdir, or a directory holding it
    with pytest.raises(export.ExportError, match=r"is or holds the workdir"):
      export.export(workdir, into, "2", overwrite=True)
  # A failure after the weights were written: the old model stays whole, nothing staged.
  from bert_jax.data import tokenizer as tokenizer_lib
  def broken(*args, **kwargs):
    raise OSError("disk gone")
  monkeypatch.setattr(tokenizer_lib, "save_vocab", broken)
  with pytest.raises(OSError, match="disk gone"):
    export.export(workdir, out, "2", overwrite=True)
  assert _digests(out) == first
  assert sorted(os.listdir(tmp_path)) == ["hf", "run"]
  monkeypatch.undo()
  export.export(workdir, out, "2", overwrite=True)
  second = _digests(out)
  assert second["model.safetensors"] != first["model.safetensors"]
  assert second["vocab.txt"] == first["vocab.txt"] and sorted(second) == sorted(first)


def test_unexportable_runs_are_one_clear_error(tmp_path):
  with pytest.raises(export.ExportError, match="no checkpoint in"):
    export.export(str(tmp_path), str(tmp_path / "hf"), "best")
  meta = tmp_path / "checkpoints" / "5" / "meta"
  meta.mkdir(parents=True)
  (meta / "metadata").write_text(json.dumps(
      {"task": "translation", "config": {"task": "translation", "train": {}}}))
  with pytest.raises(export.ExportError, match="translation: no transformers class .*MarianMT"):
    export.export(str(tmp_path), str(tmp_path / "hf"), "best")
  config = export_cases.config_of("classification")
  config.pooling = "mean"
  with pytest.raises(export.ExportError, match="mean pooling has no transformers class"):
    export.check_exportable(config)
  # export_hf asks before training: nothing runs, nothing is written.
  config.export_hf = True
  with pytest.raises(ValueError, match="export_hf=True: a classifier on mean pooling"):
    main.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run")
  assert not os.path.exists(tmp_path / "hf")
  # A pretraining model transformers' BertConfig cannot express: refused before training.
  config = export_cases.config_of("pretraining")
  config.model.pre_ln = True
  config.export_hf = True
  with pytest.raises(ValueError, match="export_hf=True: This model has no HF BertConfig .*pre_ln"):
    main.run(config, str(tmp_path / "run"))
  assert not os.path.exists(tmp_path / "run")


def test_cli_missing_workdir_is_exit_2(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  got = subprocess.run([sys.executable, "-m", "bert_jax.export", "--workdir",
                        str(tmp_path / "nope"), "--output", str(tmp_path / "hf")],
                       capture_output=True, env=env, cwd=ROOT, timeout=300)
  assert got.returncode == 2
  assert got.stderr.decode().strip().splitlines()[-1] == \
      f"export: error: workdir {tmp_path / 'nope'} does not exist."
  assert not os.path.exists(tmp_path / "hf")


def test_pretraining_run_with_export_hf_writes_workdir_hf(tmp_path, monkeypatch):
  from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
  config = export_cases.config_of("pretraining")
  config.export_hf = True
  runs = []

  def train(cfg, workdir, task):  # the loop's part: a finished run's checkpoint
    del cfg, task
    export_cases.make_workdir("pretraining", workdir)
    runs.append(workdir)
    return {"step": 1, "preempted": len(runs) > 1}

  monkeypatch.setattr(loop, "train_and_evaluate", train)
  workdir = str(tmp_path / "run")
  main.run(config, workdir)
  assert _json(os.path.join(workdir, "hf", "config.json"))["architectures"] == \
      ["BertForPreTraining"]
  got = load_file(os.path.join(workdir, "hf", "model.safetensors"))
  want = load_file(os.path.join(EXPORT, "pretraining", "model.safetensors"))
  assert all(np.array_equal(got[k], want[k]) for k in want)
  # A preempted run is not finished: no export.
  workdir2 = str(tmp_path / "run2")
  main.run(config, workdir2)
  assert not os.path.exists(os.path.join(workdir2, "hf"))
