"""Optional Weights & Biases logging: `--config.wandb.project=NAME` ('' = off).

Process 0 only. The run id is kept in `<workdir>/wandb_run_id`, so a resumed run (same
workdir) continues the same W&B run (`wandb.init(id=..., resume="allow")`). W&B's own
files go under `<workdir>/wandb`; `WANDB_MODE=offline` (the tests) writes the run there
and sends nothing. The scalars are the writer's: train/*, eval/*, perf/*.

W&B keeps the highest step it has seen: steps an interrupted run logged past its last
checkpoint are recomputed after a resume and W&B ignores the repeats (metrics.jsonl and
TensorBoard drop the first copies instead; see MetricWriter.resume_at).
"""
from __future__ import annotations

import importlib.util
import secrets

import jax
from etils import epath

from bert_jax.runtime import paths

ID_FILE = "wandb_run_id"


class WandbRun:
  """A started wandb run: log(step, scalars), summary(metrics), finish()."""

  def __init__(self, run):
    self.run = run
    self.id = run.id

  def log(self, step: int, scalars: dict) -> None:
    self.run.log(dict(scalars), step=int(step))

  def summary(self, metrics: dict) -> None:
    self.run.summary.update(dict(metrics))

  def finish(self) -> None:
    self.run.finish()


def check_available(config) -> None:
  """A project set but no wandb package: one clear error before anything runs."""
  if _project(config) and importlib.util.find_spec("wandb") is None:
    raise ValueError(f"config.wandb.project={_project(config)!r} needs the wandb package: "
                     "pip install 'bert_jax[wandb]' (or set --config.wandb.project='').")


def _project(config) -> str:
  section = config.get("wandb") if hasattr(config, "get") else None
  return str(section.get("project") or "") if section is not None else ""


def start(config, workdir: str, process_index: int | None = None) -> WandbRun | None:
  """The W&B run of this workdir (new, or the one its id file names), or None when
  config.wandb.project is '' or this is not process 0."""
  project = _project(config)
  pidx = jax.process_index() if process_index is None else process_index
  if not project or pidx != 0:
    return None
  check_available(config)
  import wandb  # pylint: disable=g-import-not-at-top
  root = paths.resolve(workdir)
  id_path = root / ID_FILE
  run_id = id_path.read_text().strip() if id_path.exists() else ""
  if not run_id:
    run_id = secrets.token_hex(4)  # W&B's own ids: 8 lowercase alphanumerics
    root.mkdir(parents=True, exist_ok=True)
    _write_atomic(id_path, run_id + "\n")
  # W&B writes its files on a local disk: a gs:// workdir keeps them in the current dir.
  local = None if paths.is_remote(workdir) else str(root)
  section = config.wandb
  run = wandb.init(project=project, entity=section.get("entity") or None,
                   name=section.get("name") or None, id=run_id, resume="allow",
                   dir=local, config=config.to_dict())
  return WandbRun(run)


def _write_atomic(path: epath.Path, text: str) -> None:
  paths.write_atomically(str(path), text)
