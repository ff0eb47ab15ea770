"""bert_jax/apps/guards.py: the settings that would destroy what is on disk, refused in one
line naming the field, before a run writes anything; through the real CLI for a workdir
over the model it starts from and for a workdir another run holds."""
import datetime
import json
import re
import os
import socket
import subprocess
import sys

import ml_collections
import pytest

from bert_jax import guards
from bert_jax.configs import bert_tiny, finetune_classification, word2vec
from scripts.bad_input_campaign import digests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("key,value,message", [
    ("train.keep_checkpoints", 0, r"train\.keep_checkpoints=0; expected an integer >= 1"),
    ("train.keep_checkpoints", -2, r"train\.keep_checkpoints=-2"),
    ("train.checkpoint_every", 0, r"train\.checkpoint_every=0; expected a number >= 1"),
    ("train.log_every", 0, r"train\.log_every=0; expected a number >= 1"),
    ("train.eval_every", -1, r"train\.eval_every=-1; expected a number >= 0"),
])
def test_settings_that_lose_checkpoints_or_crash_later_are_refused(key, value, message):
  config = bert_tiny.get_config()
  section, name = key.split(".")
  config[section][name] = value
  with pytest.raises(ValueError, match=message):
    guards.check_run(config, "/tmp/unused-workdir")


def test_word2vec_counts_go_through_its_own_check():
  config = word2vec.get_config()
  config.train.epochs = 0
  with pytest.raises(ValueError, match=r"word2vec: train\.epochs=0 must be an integer >= 1"):
    guards.check_run(config, "/tmp/unused-workdir")


def test_a_workdir_may_not_be_or_hold_an_input(tmp_path):
  config = finetune_classification.get_config()
  model = tmp_path / "hf_model"
  model.mkdir()
  config.init_from = str(model)
  with pytest.raises(ValueError, match=r"--workdir .*hf_model is config\.init_from"):
    guards.check_run(config, str(model))
  # Inside the workdir, an input is refused only where the run writes (here hf/, which
  # config.export_hf fills); the user's own files elsewhere in it are left alone.
  config.init_from = str(tmp_path / "run" / "hf")
  with pytest.raises(ValueError, match=r"--workdir's hf .*run/hf is config\.init_from"):
    guards.check_run(config, str(tmp_path / "run"))
  config.init_from = str(tmp_path / "run" / "checkpoints" / "5")
  with pytest.raises(ValueError, match=r"--workdir's checkpoints .* holds config\.init_from"):
    guards.check_run(config, str(tmp_path / "run"))
  config.init_from = str(model)
  guards.check_run(config, str(tmp_path))  # holds hf_model, but never writes there
  # Another spelling of the same directory (a symlink, a trailing slash) is the same.
  os.symlink(model, tmp_path / "link")
  with pytest.raises(ValueError, match=r"is config\.init_from"):
    guards.check_run(config, str(tmp_path / "link") + "/")
  guards.check_run(config, str(tmp_path / "run"))  # a sibling is fine
  guards.check_run(config, str(tmp_path / "hf"))  # a prefix of the name is not a parent


def test_predict_may_not_write_over_its_input(tmp_path):
  config = finetune_classification.get_config()
  config.mode = "predict"
  config.predict.input_file = str(tmp_path / "texts.csv")
  config.predict.output_file = str(tmp_path / "texts.csv")
  with pytest.raises(ValueError, match=r"config\.predict\.output_file .* is "
                                       r"config\.predict\.input_file"):
    guards.check_run(config, str(tmp_path / "run"))
  # The input may sit in the workdir: predict writes only its own output file.
  config.predict.input_file = str(tmp_path / "run" / "texts.csv")
  config.predict.output_file = str(tmp_path / "preds.jsonl")
  guards.check_run(config, str(tmp_path / "run"))


def test_comma_lists_of_inputs_are_each_checked(tmp_path):
  config = ml_collections.ConfigDict(
      {"data": {"train_file": f"{tmp_path}/a.src,{tmp_path}/w/data/test.en"}})
  with pytest.raises(ValueError, match=r"data/test\.en is config\.data\.train_file .*w/data/"
                                       r"test\.en"):
    guards.check_outputs(config, str(tmp_path / "w"))
  config.data.train_file = f"{tmp_path}/w/mine/train.src,{tmp_path}/w/mine/train.tgt"
  guards.check_outputs(config, str(tmp_path / "w"))  # the user's own files in the workdir


def _cli(workdir, *flags):
  return subprocess.run(
      [sys.executable, "-m", "bert_jax.main", "--config", "configs/bert_tiny.py",
       "--workdir", str(workdir), *flags], cwd=ROOT, capture_output=True, text=True,
      timeout=300, check=False)


@pytest.mark.parametrize("case", ["init_from is the workdir", "another run holds it"])
def test_the_cli_refuses_in_one_line_and_loses_nothing(tmp_path, case):
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text('{"model_type": "bert"}')
  flags = [f"--config.data.data_dir={tmp_path / 'data'}"]
  if case == "init_from is the workdir":
    flags.append(f"--config.init_from={run}")
    expected = rf"error: --workdir {run} is config.init_from {run}: the run would write over"
  else:  # this test's own process: alive, on this host
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lock = {"pid": os.getpid(), "host": socket.gethostname(), "started": now,
            "heartbeat": now}
    (run / ".bert_jax.lock").write_text(json.dumps(lock))
    expected = (rf"error: --workdir {run} is in use by another run \(pid {os.getpid()} on "
                rf"{socket.gethostname()}, started {re.escape(now)}\)")
  before = digests(run)
  proc = _cli(run, *flags)
  assert proc.returncode == 2, proc.stderr
  errors = [l for l in proc.stderr.splitlines() if l.startswith("error:")]
  assert len(errors) == 1 and re.match(expected, errors[0]), proc.stderr
  assert "Traceback" not in proc.stderr
  assert digests(run) == before and not (tmp_path / "data").exists()
