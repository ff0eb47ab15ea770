"""train/phases.py: step plans, per-phase batch sizes, the batch-size warmup helper, and
end to end: a batch warmup and a ModernBERT context extension that resume exactly."""
import json
import os
import shutil

import ml_collections
import numpy as np
import pytest

from bert_jax.checkpoint import manager as ckpt_lib
from bert_jax.checkpoint import read
from bert_jax.data import sampling
from bert_jax.tasks import registry
from bert_jax.train import loop, phases
from bert_jax.train.defaults import model_config
from tests.train.test_loop_paths import paths_config


def _config(**train) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(dict(train=dict(dict(batch_size=32, phases=()), **train)))


def test_a_stage_goes_on_through_the_data_where_the_stages_before_it_stopped():
  """Stages of one length read one stream: 3 steps at 8 rows, then 16-row steps from
  example 24 on, the examples 8-row steps 3 and 4 would have read (never the first ones
  again); a phase of another length starts its own stream; eval batches are one size per
  length."""
  plan = phases.plan(_config(batch_size=16, phases=(
      dict(fraction=0.3, batch_size=8, max_seq_length=64), dict(fraction=0.2, max_seq_length=64),
      dict(fraction=0.5, batch_size=4, max_seq_length=128))), 10)
  length = lambda ph: ph["max_seq_length"]
  tc = _config(batch_size=16).train
  assert [phases.stream_start(tc, plan, i, length) for i in range(3)] == [0, 24, 0]
  assert [phases.eval_batch_size(tc, plan, i, length) for i in range(3)] == [16, 16, 4]
  small = sampling.TrainKeys(1000, 8, 0, 1, seed=0)
  big = sampling.TrainKeys(1000, 16, 0, 1, seed=0, start=24)
  np.testing.assert_array_equal(big(0), np.concatenate([small(3), small(4)]))
  seen = np.concatenate([small(j) for j in range(3)])[:, 1]
  assert not set(seen) & set(big(0)[:, 1])


def test_warmup_stages_share_the_tokens_and_the_rest_runs_the_full_batch():
  got = phases.batch_warmup_phases(4096, 1024, 2**30, 2, 10_000, max_seq_length=1024)
  assert [(p["batch_size"], round(p["fraction"] * 10_000)) for p in got] == [
      (1024, 512), (2048, 256), (4096, 9232)]
  assert all(p["max_seq_length"] == 1024 for p in got)
  tokens = [round(p["fraction"] * 10_000) * p["batch_size"] * 1024 for p in got[:2]]
  assert tokens == [2**29, 2**29]
  plan = phases.plan(_config(batch_size=4096, phases=got), 10_000)
  assert [(a, b) for a, b, _ in plan] == [(0, 512), (512, 768), (768, 10_000)]


def test_explicit_stages_and_a_fraction_leave_room_for_a_later_phase():
  got = phases.batch_warmup_phases(64, 16, 1024, (8, 32), 20, fraction=0.5)
  steps = [round(p["fraction"] * 20) for p in got]
  assert [p["batch_size"] for p in got] == [8, 32, 64] and steps == [4, 1, 5]
  config = _config(batch_size=64, phases=got + (dict(fraction=0.5, max_seq_length=32),))
  plan = phases.plan(config, 20)
  assert [(a, b) for a, b, _ in plan] == [(0, 4), (4, 5), (5, 10), (10, 20)]
  assert [phases.batch_size(config.train, p) for _, _, p in plan] == [8, 32, 64, 64]
  assert [phases.phase_of(plan, s) for s in (0, 3, 4, 5, 9, 10, 19)] == [0, 0, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("args,message", [
    ((48, 16, 1e3, 5, 100), r"^stages=5: batch_size=48 must split into batch_size / 2\^5"),
    ((64, 16, 1e3, (8, 64), 100), r"^stages=\[8, 64\]: expected sizes in \(0, batch_size=64\)"),
    ((64, 16, 1e6, 2, 100), r"^warmup_tokens=1e\+06 takes 2930 warmup steps, not fewer than"),
])
def test_a_warmup_it_cannot_build_is_one_line(args, message):
  with pytest.raises(ValueError, match=message) as e:
    phases.batch_warmup_phases(*args)
  assert "\n" not in str(e.value)


@pytest.mark.parametrize("train,message", [
    (dict(batch_size=12), r"^train.batch_size=12 must be a positive multiple of the 8 "),
    (dict(phases=(dict(fraction=0.5, batch_size=4), {})),
     r"^train.phases\[0\].batch_size=4 must be a positive multiple of the 8 data-parallel"),
    (dict(phases=(dict(batch_size=8), {})), r"^train.phases\[0\].fraction=None; expected"),
    (dict(phases=(dict(fraction=0.7), dict(fraction=0.6), {})),
     r"^train.phases fractions before the last sum to 1.3 > 1"),
])
def test_a_phase_the_mesh_or_the_steps_cannot_run_is_one_line(train, message):
  with pytest.raises(ValueError, match=message) as e:
    phases.check(_config(**train).train, 8, (8, 1, 1))
  assert "\n" not in str(e.value)
  phases.check(_config(phases=(dict(fraction=0.5, batch_size=8), {})).train, 8, (8, 1, 1))


# ---------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("data"))


def _rows(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return {r["step"]: r for r in map(json.loads, f) if "train/loss" in r}


def _resume_from(ref_dir, step, tmp_path, config, corrupt=None):
  """A copy of `ref_dir` with its checkpoints after `step` removed (but `corrupt`, left
  half-written, so the rerun meets it first and falls back to `step`), trained again to
  the end: (its metric rows, the rerun's result)."""
  copy = tmp_path / f"from{step}"
  shutil.copytree(ref_dir, copy)
  for s in ckpt_lib.Checkpointer(str(copy / "checkpoints")).all_steps():
    if s > step and s != corrupt:
      shutil.rmtree(copy / "checkpoints" / str(s))
  for root, _, files in os.walk(copy / "checkpoints" / str(corrupt)) if corrupt else ():
    for name in files:
      with open(os.path.join(root, name), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(root, name)) // 2)
  result = loop.train_and_evaluate(config, str(copy), registry.get_task(config))
  if corrupt:  # the rerun met it, moved it aside and fell back
    assert [p.name for p in (copy / "checkpoints").iterdir()
            if p.name.startswith(f"{corrupt}.corrupt-")], corrupt
  return _rows(str(copy)), result


def _data_position(workdir, step) -> int:
  """The saved train stream's next batch number at checkpoint `step`."""
  data = os.path.join(workdir, "checkpoints", str(step), "data", "shard_0-of-1.json")
  with open(data) as f:
    return json.load(f)["next_index"]


def test_a_batch_warmup_runs_each_stage_at_its_size_and_resumes_exactly(
    data_dir, tmp_path, capsys):
  """Stages of 8 and 16 rows for 512 tokens each (4 and 2 steps at 16 tokens), then 32.
  Resumed mid-stage (step 3) and at a stage boundary (step 4), every step's loss equals
  the uninterrupted run's; also when the newest checkpoint (step 5, of stage 1) is
  unreadable and the rerun falls back to step 3 (stage 0's stream at 8 rows)."""
  warmup = phases.batch_warmup_phases(32, 16, 1024, 2, 8, max_seq_length=16,
                                      max_predictions_per_seq=4)
  config = paths_config(data_dir, 8, batch_size=32, log_every=1, checkpoint_every=1,
                        keep_checkpoints=10, async_checkpoints=False, phases=warmup)
  ref_dir = str(tmp_path / "ref")
  assert loop.train_and_evaluate(config, ref_dir, registry.get_task(config))["step"] == 8
  out = capsys.readouterr().out
  assert "phase 1: " in out and "'batch_size': 16" in out and "'batch_size': 32" in out
  ref = _rows(ref_dir)
  sizes = {1: 8, 2: 8, 3: 8, 4: 8, 5: 16, 6: 16, 7: 32, 8: 32}
  # One step a window: sequences per second x seconds per step = the step's batch.
  assert {s: round(r["perf/seq_per_sec"] * r["perf/step_time_s"], 6)
          for s, r in ref.items()} == sizes
  assert {s: r["perf/tokens_per_sec"] / r["perf/seq_per_sec"] for s, r in ref.items()} == {
      s: pytest.approx(16) for s in sizes}
  metas = {s: ckpt_lib.read_meta(os.path.join(ref_dir, "checkpoints", str(s)))["phase"]
           for s in (3, 4, 5, 8)}
  assert metas == {3: 0, 4: 0, 5: 1, 8: 2}
  # Each phase's own stream, counted in its own batches.
  assert [_data_position(ref_dir, s) for s in (3, 4, 5, 6, 7)] == [3, 4, 1, 2, 1]
  for start, corrupt in ((3, None), (4, None), (3, 5)):
    got, result = _resume_from(ref_dir, start, tmp_path / str(corrupt), config, corrupt)
    assert result["step"] == 8 and "at step %d" % start in capsys.readouterr().out
    assert sorted(got) == list(range(1, 9))
    for s in range(start + 1, 9):
      assert got[s]["train/loss"] == pytest.approx(ref[s]["train/loss"], abs=1e-6), (start, s)
      assert round(got[s]["perf/seq_per_sec"] * got[s]["perf/step_time_s"], 6) == sizes[s]


def _modernbert_config(data_dir):
  """A 2-layer ModernBERT (one global, one local layer) on packed rows: 2 steps at 64
  tokens with global theta 10,000, then 2 at 128 with 160,000."""
  config = paths_config(data_dir, 4, log_every=1, checkpoint_every=1, keep_checkpoints=10,
                        async_checkpoints=False, phases=(
                            dict(fraction=0.5, max_seq_length=64, max_predictions_per_seq=10,
                                 rotary_base=10_000.0),
                            dict(fraction=0.5, max_seq_length=128, max_predictions_per_seq=20,
                                 rotary_base=160_000.0)))
  config.model = model_config("modernbert/tiny", vocab_size=256, max_len=128, num_layers=2,
                              hidden_size=32, num_heads=2, mlp_dim=64, local_window=32)
  config.data.mode = "mlm_packed"
  return config


def test_a_modernbert_context_extension_switches_theta_and_resumes_exactly(
    data_dir, tmp_path, capsys):
  config = _modernbert_config(data_dir)
  task = registry.get_task(config)
  assert task.model_config.rotary_base == 160_000.0  # the variant's (the final model's)
  assert {n: m.config.rotary_base for n, m in task.phase_models.items()} == {
      64: 10_000.0, 128: 160_000.0}
  ref_dir = str(tmp_path / "ref")
  assert loop.train_and_evaluate(config, ref_dir, task)["step"] == 4
  assert "'rotary_base': 160000.0" in capsys.readouterr().out
  ref = _rows(ref_dir)
  assert {s: r["perf/tokens_per_sec"] / r["perf/seq_per_sec"] for s, r in ref.items()} == {
      1: pytest.approx(64), 2: pytest.approx(64), 3: pytest.approx(128), 4: pytest.approx(128)}
  assert _data_position(ref_dir, 3) == 1  # phase 1's stream, one batch in
  # A checkpoint records the theta its phase trained with: export and loading serve that.
  thetas = {s: read.read_meta(os.path.join(ref_dir, "checkpoints", str(s)))["model_config"][
      "rotary_base"] for s in (2, 4)}
  assert thetas == {2: 10_000.0, 4: 160_000.0}
  # From the end of phase 0 (phase 1 starts its own stream) and from inside phase 1 (its
  # saved stream position restored).
  for start in (2, 3):
    got, result = _resume_from(ref_dir, start, tmp_path, config)
    assert result["step"] == 4 and "at step %d" % start in capsys.readouterr().out
    for s in range(start + 1, 5):
      assert got[s]["train/loss"] == pytest.approx(ref[s]["train/loss"], abs=1e-6), (start, s)
