"""train_and_evaluate paths beyond test_loop.py: periodic eval, best + last-K checkpoints,
skipping non-finite steps, LAMB, sequence-length phases and MLM-only packed rows.

One tiny run per path over one prepared corpus (each run compiles for seconds).
"""
import glob
import json
import os
import struct

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.checkpoint import manager as ckpt_lib
from bert_jax.tasks.pretraining import PretrainingTask
from bert_jax.tasks import registry
from bert_jax.train import loop, optim, steps
from tests.train.test_loop import e2e_config

PEAK = 1e9  # fixed MFU denominator: no matmul benchmark per run
TRAIN_KEYS = {"train/loss", "train/mlm_loss", "train/mlm_accuracy", "train/nsp_loss",
              "train/nsp_accuracy", "train/learning_rate", "train/grad_norm",
              "train/skipped_steps", "perf/seq_per_sec", "perf/tokens_per_sec",
              "perf/step_time_s", "perf/tflops_per_device", "perf/mfu"}
EVAL_KEYS = {"eval/mlm_loss", "eval/mlm_accuracy", "eval/nsp_loss", "eval/nsp_accuracy"}


def paths_config(data_dir, num_steps, **train):
  c = e2e_config(data_dir, num_steps)
  c.model.num_layers = 1             # less to compile; the paths are layer-agnostic
  c.data.validation_fraction = 0.3   # 1 of the 6 documents, 39 eval instances
  c.mesh_shape = (8, 1, 1)           # pure data parallel compiles fastest
  c.train.update(dict(eval_every=0, checkpoint_every=100, async_checkpoints=True,
                      peak_flops_per_device=PEAK))
  c.train.update(train)
  return c


def _rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(l) for l in f]


def _train_rows(workdir):
  return {r["step"]: r for r in _rows(workdir) if "train/loss" in r}


def _eval_rows(workdir):
  return {r["step"]: r for r in _rows(workdir) if any(k.startswith("eval/") for k in r)}


def _tensorboard_events(workdir):
  """The events of the workdir's event files (TFRecord framing, no TensorFlow)."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  for path in glob.glob(os.path.join(workdir, "events.out.tfevents*")):
    with open(path, "rb") as f:
      data = f.read()
    pos = 0
    while pos < len(data):
      (n,) = struct.unpack("<Q", data[pos:pos + 8])
      yield event_pb2.Event.FromString(data[pos + 12:pos + 12 + n])
      pos += 12 + n + 4  # length, its crc, the record, its crc


def _tensorboard_scalars(workdir) -> dict:
  """{tag: {step: value}} of the workdir's scalars."""
  out = {}
  for event in _tensorboard_events(workdir):
    for v in event.summary.value:
      if v.HasField("simple_value"):
        out.setdefault(v.tag, {})[event.step] = v.simple_value
  return out


def _tensorboard_texts(workdir) -> dict:
  """{tag: text} of the text summaries (the text plugin stores a string tensor)."""
  return {v.tag.removesuffix("/text_summary"): v.tensor.string_val[0].decode()
          for event in _tensorboard_events(workdir) for v in event.summary.value
          if v.metadata.plugin_data.plugin_name == "text"}


def _tensorboard_hparams(workdir):
  """({name: HParam value proto} of the session start, {metric tags} of the experiment):
  what TensorBoard's hparams plugin reads (its plugin data, version 0)."""
  from tensorboardX.proto import plugin_hparams_pb2  # pylint: disable=g-import-not-at-top
  hparams, tags = None, None
  for event in _tensorboard_events(workdir):
    for v in event.summary.value:
      if v.metadata.plugin_data.plugin_name != "hparams":
        continue
      data = plugin_hparams_pb2.HParamsPluginData.FromString(v.metadata.plugin_data.content)
      if v.tag == "_hparams_/session_start_info":
        hparams = dict(data.session_start_info.hparams)
      elif v.tag == "_hparams_/experiment":
        tags = {m.name.tag for m in data.experiment.metric_infos}
  assert hparams is not None and tags is not None, "no hparams summary in the event files"
  return hparams, tags


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def evaluated(data_dir, tmp_path_factory):
  """6 steps, eval and a checkpoint every 2, keep 1 + the best eval mlm_loss (async saves).

  "Best" is the HIGHEST eval loss here: at the config's learning rate the eval loss falls
  from evaluation to evaluation, so the best checkpoint is an early one, not the latest.
  (An overshooting learning rate made "min" pick an early step only for one corpus and
  vocabulary: a change of either moved the best to the last step.)
  """
  workdir = str(tmp_path_factory.mktemp("evaluated"))
  config = paths_config(data_dir, 6, eval_every=2, checkpoint_every=2, keep_checkpoints=1,
                        best_metric="mlm_loss", best_mode="max")
  assert config.train.async_checkpoints
  result = loop.train_and_evaluate(config, workdir, registry.get_task(config))
  return config, workdir, result


def test_periodic_eval_and_train_metrics(evaluated):
  config, workdir, result = evaluated
  evals = _eval_rows(workdir)
  assert sorted(evals) == [2, 4, 6]
  for row in evals.values():
    assert EVAL_KEYS <= set(row)
    assert 0.0 <= row["eval/mlm_accuracy"] <= 1.0 and 0.0 <= row["eval/nsp_accuracy"] <= 1.0
    assert np.isfinite(row["eval/mlm_loss"]) and row["eval/mlm_loss"] > 0
    assert np.isfinite(row["eval/nsp_loss"]) and row["eval/nsp_loss"] > 0
  assert result["eval/mlm_loss"] == pytest.approx(evals[6]["eval/mlm_loss"])

  train = _train_rows(workdir)
  assert sorted(train) == [1, 2, 3, 4, 5, 6]
  schedule = optim.learning_rate_schedule(config.train, 6)
  flops = 8 * PretrainingTask(config).flops_per_example(16, 4)
  for step, row in train.items():
    assert TRAIN_KEYS <= set(row), (step, sorted(row))
    assert all(np.isfinite(row[k]) for k in TRAIN_KEYS), row
    assert row["train/skipped_steps"] == 0
    assert row["train/loss"] == pytest.approx(row["train/mlm_loss"] + row["train/nsp_loss"],
                                              rel=1e-5)
    assert row["train/learning_rate"] == pytest.approx(float(schedule(step - 1)))
    assert 0.0 <= row["train/mlm_accuracy"] <= 1.0
    assert 0.0 <= row["train/nsp_accuracy"] <= 1.0
    assert row["train/grad_norm"] > 0 and row["perf/step_time_s"] > 0 and row["perf/mfu"] > 0
    assert row["perf/tokens_per_sec"] / row["perf/seq_per_sec"] == pytest.approx(16)
    assert row["perf/seq_per_sec"] * row["perf/step_time_s"] == pytest.approx(8)  # batch of 8
    assert row["perf/mfu"] == pytest.approx(flops / row["perf/step_time_s"] / (8 * PEAK))
    # TFLOP/s per device: the same FLOPs over the same time, on 8 devices.
    assert row["perf/tflops_per_device"] == pytest.approx(
        flops / row["perf/step_time_s"] / 8 / 1e12)

  tb = _tensorboard_scalars(workdir)
  assert {s: pytest.approx(r["eval/mlm_accuracy"]) for s, r in evals.items()} == tb[
      "eval/mlm_accuracy"]
  assert {s: pytest.approx(r["train/loss"]) for s, r in train.items()} == tb["train/loss"]
  assert set(tb) >= TRAIN_KEYS | EVAL_KEYS
  # The run's end: its config and final metrics on TensorBoard's hparams dashboard.
  hparams, metric_tags = _tensorboard_hparams(workdir)
  assert hparams["train.learning_rate"].number_value == pytest.approx(config.train.learning_rate)
  assert hparams["train.best_metric"].string_value == "mlm_loss"
  assert hparams["model.num_layers"].number_value == 1
  assert hparams["train.async_checkpoints"].bool_value is True
  assert hparams["mesh_shape"].string_value == "(8, 1, 1)"
  assert metric_tags >= {"train/loss", "perf/mfu"} | EVAL_KEYS
  assert metric_tags <= set(tb)  # each one a logged scalar the dashboard can show
  # The MFU denominator is named where the run's perf scalars are.
  assert _tensorboard_texts(workdir)["perf/mfu_peak"].startswith(
      "MFU peak: 1.0 GFLOP/s per device, config train.peak_flops_per_device")


def test_keeps_the_latest_and_the_best_checkpoint(evaluated):
  _, workdir, _ = evaluated
  losses = {s: r["eval/mlm_loss"] for s, r in _eval_rows(workdir).items()}
  best = max(losses, key=losses.get)
  assert best != 6, f"setup: the eval loss should fall from step 2 on: {losses}"
  steps_kept = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints")).all_steps()
  assert steps_kept == sorted({best, 6})  # keep_checkpoints=1 plus the best by eval
  # Both async saves are complete and hold different params.
  ckpt_dir = os.path.join(workdir, "checkpoints")
  _, best_params, _ = ckpt_lib.load_params_for_inference(os.path.join(ckpt_dir, str(best)))
  _, last_params, _ = ckpt_lib.load_params_for_inference(os.path.join(ckpt_dir, "6"))
  kernel = lambda p: p["mlm_head"]["transform"]["kernel"]
  assert np.isfinite(kernel(best_params)).all()
  assert not np.allclose(kernel(best_params), kernel(last_params))


def test_skip_nonfinite_skips_the_step_and_finishes(data_dir, tmp_path, monkeypatch):
  train_step = steps.train_step

  def poisoned(state, batch, **kw):  # NaN weights at step 2 only: a NaN loss and gradient
    w = batch["masked_lm_weights"]
    batch = dict(batch, masked_lm_weights=jnp.where(state.step == 1, jnp.nan, w))
    return train_step(state, batch, **kw)

  monkeypatch.setattr(steps, "train_step", poisoned)
  config = paths_config(data_dir, 6, log_every=3, skip_nonfinite=True)
  result = loop.train_and_evaluate(config, str(tmp_path), registry.get_task(config))
  assert result["step"] == 6 and not result["preempted"]
  train = _train_rows(str(tmp_path))
  assert sorted(train) == [3, 6]
  assert train[3]["train/skipped_steps"] == 1 and train[6]["train/skipped_steps"] == 0
  assert all(np.isfinite(r[k]) for r in train.values() for k in TRAIN_KEYS)
  _, params, _ = ckpt_lib.load_params_for_inference(str(tmp_path))
  leaves = jax.tree_util.tree_leaves(params)
  assert leaves and all(np.isfinite(x).all() for x in leaves)


def _abstract_state(config, optimizer):
  """The TrainState a run of `optimizer` would checkpoint, as shapes only."""
  config = config.copy_and_resolve_references()
  config.train.optimizer = optimizer
  task = PretrainingTask(config)
  tx, _ = optim.make_optimizer(config.train, config.train.num_steps)
  dummy = task.dummy_batch(8, 16, 4)

  def init(key):
    return steps.create_state(task.init(key, dummy)["params"], tx, key)
  return nn.unbox(jax.eval_shape(init, jax.random.key(0)))


def test_lamb_lowers_the_loss_and_checkpoints_its_state(data_dir, tmp_path):
  # Batches of 32 keep the per-step loss steady enough to compare step 8 with step 1.
  config = paths_config(data_dir, 8, optimizer="lamb", learning_rate=0.2, warmup_steps=0,
                        schedule="constant", batch_size=32)
  loop.train_and_evaluate(config, str(tmp_path), registry.get_task(config))
  losses = {s: r["train/loss"] for s, r in _train_rows(str(tmp_path)).items()}
  assert sorted(losses) == list(range(1, 9))
  assert losses[8] < losses[1] - 0.3, losses
  ck = ckpt_lib.Checkpointer(str(tmp_path / "checkpoints"))
  saved = ck.state_metadata(8)
  ckpt_lib.check_compatible(saved, _abstract_state(config, "lamb"), "lamb")
  with pytest.raises(ckpt_lib.CheckpointMismatchError, match="opt_state"):
    ckpt_lib.check_compatible(saved, _abstract_state(config, "adamw"), "adamw")


def test_sequence_length_phases_switch_the_batch_shape(data_dir, tmp_path, capsys):
  config = paths_config(data_dir, 8, phases=(
      dict(fraction=0.5, max_seq_length=16, max_predictions_per_seq=4),
      dict(fraction=0.5, max_seq_length=32, max_predictions_per_seq=6)))
  config.model.max_len = 32
  result = loop.train_and_evaluate(config, str(tmp_path), registry.get_task(config))
  assert result["step"] == 8
  out = capsys.readouterr().out
  assert "phase 1: " in out and "'max_seq_length': 32" in out
  train = _train_rows(str(tmp_path))
  ratio = {s: r["perf/tokens_per_sec"] / r["perf/seq_per_sec"] for s, r in train.items()}
  assert ratio == {s: pytest.approx(16 if s <= 4 else 32) for s in range(1, 9)}
  assert all(np.isfinite(r["train/loss"]) for r in train.values())


def test_mlm_packed_trains_without_nsp(data_dir, tmp_path):
  config = paths_config(data_dir, 4, eval_every=4)
  config.data.mode = "mlm_packed"
  result = loop.train_and_evaluate(config, str(tmp_path), registry.get_task(config))
  assert result["step"] == 4
  train = _train_rows(str(tmp_path))
  assert sorted(train) == [1, 2, 3, 4]
  for row in train.values():
    assert {"train/mlm_loss", "train/mlm_accuracy"} <= set(row)
    assert not [k for k in row if "nsp" in k], row
    assert np.isfinite(row["train/loss"])
    assert row["train/loss"] == pytest.approx(row["train/mlm_loss"], rel=1e-5)
  evals = _eval_rows(str(tmp_path))
  assert sorted(evals) == [4]
  assert set(evals[4]) - {"step", "time"} == {"eval/mlm_loss", "eval/mlm_accuracy"}


def test_fine_tunes_from_our_pretraining_checkpoint(evaluated, tmp_path):
  """Pretrain -> fine-tune: init_from one of our workdirs gives its encoder and tokenizer."""
  from bert_jax.train.defaults import finetune_config  # pylint: disable=g-import-not-at-top
  _, pretrain_dir, _ = evaluated
  rows = [("the cat sat", "a"), ("a dog ran far", "b")] * 8
  data = tmp_path / "cls.csv"
  data.write_text("sentence,label\n" + "".join(f"{t},{l}\n" for t, l in rows))
  c = finetune_config("classification", "file", "accuracy", max_seq_length=16,
                      train_file=str(data), eval_file=str(data))
  c.init_from = pretrain_dir
  c.train.update(batch_size=8, num_epochs=1.0, learning_rate=1e-3, async_checkpoints=False,
                 peak_flops_per_device=PEAK)
  task = registry.get_task(c)
  assert task.model_config.num_layers == 1 and task.model_config.hidden_size == 32
  _, saved, _ = ckpt_lib.load_params_for_inference(pretrain_dir)
  template = jax.tree_util.tree_map(
      lambda x: np.zeros(x.shape, x.dtype),
      nn.meta.unbox(jax.eval_shape(lambda: task.init(jax.random.key(0),
                                                     task.dummy_batch(8, 16)))["params"]))
  loaded = task.load_pretrained_params(c.init_from, template)
  np.testing.assert_array_equal(loaded["bert"]["embeddings"]["token_embedder"]["embedding"],
                                saved["bert"]["embeddings"]["token_embedder"]["embedding"])
  task = registry.get_task(c)
  result = loop.train_and_evaluate(c, str(tmp_path / "ft"), task)
  # Packed rows (the config's default): one epoch is its rows in steps of 8 rows.
  assert result["step"] == -(-task.plans["train"].num_rows // 8) == task.steps_per_epoch(8)
  assert np.isfinite(result["train/loss"])
  assert 0.0 <= result["eval/accuracy"] <= 1.0


def test_a_log_window_across_a_phase_switch_counts_each_step_at_its_length(data_dir, tmp_path):
  """Steps 1-4 at 16 tokens, 5-8 at 32; the window logged at step 6 holds steps 4, 5, 6."""
  config = paths_config(data_dir, 8, log_every=3, phases=(
      dict(fraction=0.5, max_seq_length=16, max_predictions_per_seq=4),
      dict(fraction=0.5, max_seq_length=32, max_predictions_per_seq=6)))
  config.model.max_len = 32
  task = registry.get_task(config)
  loop.train_and_evaluate(config, str(tmp_path), task)
  train = _train_rows(str(tmp_path))
  assert sorted(train) == [3, 6, 8]
  lengths = {3: (16, 16, 16), 6: (16, 32, 32), 8: (32, 32)}
  preds = {16: 4, 32: 6}
  for step, row in train.items():
    n = len(lengths[step])
    assert row["perf/tokens_per_sec"] / row["perf/seq_per_sec"] == pytest.approx(
        sum(lengths[step]) / n)
    flops = sum(8 * task.flops_per_example(t, preds[t]) for t in lengths[step]) / n
    assert row["perf/mfu"] == pytest.approx(flops / row["perf/step_time_s"] / (8 * PEAK))


def test_resuming_another_models_workdir_names_what_differs(evaluated, tmp_path):
  """A workdir rerun with another model size: one line naming the field (it was 40 lines
  of the optimizer state's missing arrays, printed twice), nothing in the workdir lost."""
  import copy  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  config, workdir, _ = evaluated
  copied = str(tmp_path / "run")
  shutil.copytree(workdir, copied)  # the module's run stays as it is for the other tests
  before = sorted(os.listdir(os.path.join(copied, "checkpoints")))
  other = copy.deepcopy(config)
  other.model.num_layers = 2
  with pytest.raises(ckpt_lib.CheckpointMismatchError) as info:
    loop.train_and_evaluate(other, copied, registry.get_task(other))
  step_dir = os.path.join(copied, "checkpoints", "6")
  assert str(info.value) == (
      f"checkpoint {step_dir} was saved by another run: model.num_layers=1 (this run: 2). "
      "A workdir resumes its own run: use a new --workdir or the config it was saved with "
      "(--config.init_from=DIR takes only the params of a BERT checkpoint).")
  assert sorted(os.listdir(os.path.join(copied, "checkpoints"))) == before
  # Another task's checkpoint (word2vec saves no model_config): its task is named.
  assert ckpt_lib.run_differences({"task": "word2vec", "config": {}}, ckpt_lib.read_meta(
      step_dir)) == ["task='word2vec' (this run: 'bert_pretraining')"]
  saved = ckpt_lib.read_meta(step_dir)
  lamb = copy.deepcopy(saved)
  lamb["config"]["train"]["optimizer"] = "lamb"
  assert ckpt_lib.run_differences(saved, lamb) == [
      f"train.optimizer={saved['config']['train']['optimizer']!r} (this run: 'lamb')"]
  assert ckpt_lib.run_differences(saved, saved) == []


def test_rerunning_a_finished_run_says_there_is_nothing_to_train(evaluated, tmp_path, capsys):
  """A finished workdir rerun (or with num_steps below its step) printed 'steps 6->6' and
  exited 0 saying nothing; it trains nothing and keeps every checkpoint."""
  import copy  # pylint: disable=g-import-not-at-top
  import shutil  # pylint: disable=g-import-not-at-top
  config, workdir, _ = evaluated
  copied = str(tmp_path / "run")
  shutil.copytree(workdir, copied)
  before = sorted(os.listdir(os.path.join(copied, "checkpoints")))
  fewer = copy.deepcopy(config)
  fewer.train.num_steps = 4
  capsys.readouterr()
  result = loop.train_and_evaluate(fewer, copied, registry.get_task(fewer))
  assert result["step"] == 6
  assert (f"nothing to train: {copied}/checkpoints is at step 6 and this run ends at step 4 "
          "(train.num_steps / num_epochs): raise it to train further, or use a new "
          "--workdir.") in capsys.readouterr().out
  assert sorted(os.listdir(os.path.join(copied, "checkpoints"))) == before
