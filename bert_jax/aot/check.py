"""check(config, topology): compile every step of a config for a topology and report."""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Sequence

import ml_collections
from etils import epath

from bert_jax.hardware import chips
from bert_jax.aot import compile as compile_lib
from bert_jax.aot import cost as cost_lib
from bert_jax.aot import traffic
from bert_jax.aot import report as report_lib
from bert_jax.train import phases as phases_lib

STEPS = ("train", "eval")


def check(config: ml_collections.ConfigDict, topology: str, steps: Sequence[str] = STEPS,
          output_dir: str = "", config_name: str = "", task=None, vocab_size: int = 0,
          cost: bool = True) -> dict:
  """Compiles `steps` of every phase of `config` for `topology`; returns the JSON report.

  cost: add each fitting step's "cost", the TPU compiler's estimate (aot/cost.py), which
  compiles the step once or twice more.

  With output_dir, writes report.json and one HLO text file per compiled step there.
  Raises DoesNotFitError (after writing the report) when a step does not fit in HBM.
  word2vec (its own trainer and step) compiles its train step; vocab_size is its table
  rows (default aot/word2vec.DEFAULT_VOCAB_SIZE), the other tasks ignore it.
  """
  bad = [s for s in steps if s not in STEPS]
  if bad:
    raise ValueError(f"unknown steps {bad}; choose among {STEPS}.")
  t0 = time.perf_counter()
  if task is None and config.task == "word2vec":
    from bert_jax.aot import word2vec  # pylint: disable=g-import-not-at-top
    report, texts = word2vec.check(config, topology, vocab_size, config_name)
    names = ["train_phase0"]
  else:
    report, texts, names = _check_task(config, topology, steps, config_name, task, cost)
  report["seconds"] = round(time.perf_counter() - t0, 2)
  report["fits"] = all(r["fits"] for r in report["steps"])
  if output_dir:
    out = epath.Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in zip(names, texts):
      if text is not None:
        (out / f"{name}.hlo.txt").write_text(text)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
  if not report["fits"]:
    first = next(r for r in report["steps"] if not r["fits"])
    err = report_lib.DoesNotFitError(f"{report['config']} on {topology}, mesh "
                                     f"{report['mesh']}: {first['error']}")
    err.report = report
    raise err
  return report


def _check_task(config, topology, steps, config_name, task, cost):
  """(report, HLO texts, their file names) of a registry.TASKS task's shared steps."""
  estimate = cost and task is None  # the cost twins are built from the config
  if task is None:
    from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
    if config.task in registry.TRAINERS:
      raise ValueError(f"config.task={config.task!r} trains with its own loop "
                       f"({registry.TRAINERS[config.task][0]}) and has no AOT check yet.")
    from bert_jax.train import defaults  # pylint: disable=g-import-not-at-top
    defaults.resolve_platform(config, "tpu")  # the target's default, not this host's
    task = registry.get_task(config)
  setup = compile_lib.setup(config, topology, task)
  report = {"config": config_name or config.task, "topology": topology,
            "num_chips": len(setup.mesh.devices.flat), "chip": dataclasses.asdict(setup.chip),
            "mesh": dict(setup.mesh.shape), "remat_policy": task.model_config.remat_policy,
            "row_shards": report_lib.row_shards(setup.mesh, int(config.train.batch_size)),
            "state": report_lib.state_bytes(setup.abstract), "steps": []}
  texts, names = [], []
  for i, phase in enumerate(compile_lib.phases(config)):
    batch = phases_lib.batch_size(config.train, phase)  # a batch warmup's stage: its own
    for name in steps:
      step = compile_lib.compile_step(setup, name, phase, batch)
      r = report_lib.step_report(step, task, batch, setup.chip, report["num_chips"])
      # A phase may recompute differently from the model's default (tasks/pretraining.py).
      r["remat_policy"] = phase.get("remat_policy", task.model_config.remat_policy)
      if estimate and r["fits"]:
        r["cost"] = _cost(config, topology, name, phase, r, report, setup)
      elif cost and r["fits"]:
        r["cost_note"] = "not estimated: its twin is built from the config, not a given task"
      report["steps"].append(r)
      texts.append(step.hlo_text)
      names.append(f"{name}_phase{i}")
  return report, texts, names


def _cost(config, topology, name, phase, r, report, setup) -> dict | None:
  """The step's "cost" (cost_lib.estimate + how it was obtained), None when unknown (the
  reason in r["cost_note"]: the cost is an extra, so no failure of it stops the report).
  setup: the step's own (compile_lib.setup of `config`), reused when the cost compiles
  that same config (unrolled layers); only a twin gets a task and setup of its own."""
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top

  def compile_twin(c):
    s = setup if c is config else compile_lib.setup(c, topology, registry.get_task(c))
    step = compile_lib.compile_step(s, name, phase, r["global_batch"],
                                    cost_lib.COST_COMPILER_OPTIONS)
    if step.compiled is None:
      raise ValueError(f"the {name} step's cost twin does not fit: "
                       f"{step.error.splitlines()[0][:200]}")
    out = cost_lib.compiler_cost(step.compiled)
    if step.hlo_text is not None:  # where the bytes go (aot/traffic.py)
      try:
        out["traffic"] = traffic.bytes_by_category(step.hlo_text, top=10)
      except Exception as e:  # pylint: disable=broad-except  (HLO text it cannot read)
        out["traffic_error"] = str(e).splitlines()[0][:200]
    return out

  m = setup.task.model_config
  try:
    raw, method = cost_lib.step_cost(config, bool(getattr(m, "scan_layers", False)),
                                     compile_twin)
  except Exception as e:  # pylint: disable=broad-except  (libtpu errors, an odd program)
    raw, method = None, "unknown: " + (str(e).strip().splitlines() or [type(e).__name__])[0]
  if raw is None:
    r["cost_note"] = method
    return None
  tokens = r["global_batch"] * r["seq_len"]
  one_stack = (hasattr(m, "num_layers") and hasattr(m, "hidden_size")
               and not int(getattr(m, "num_decoder_layers", 0) or 0)
               and not int(getattr(m, "local_window", 0) or 0))
  if one_stack:
    flops = cost_lib.model_flops(report["state"]["num_params"], int(m.num_layers),
                                 r["seq_len"], int(m.hidden_size), tokens,
                                 train=name == "train")
  else:  # an encoder-decoder, the GRU, or local layers (ModernBERT: 12LSdT would count
    # keys beyond their window): the task's own accounting (step_report's)
    flops, method = r["model_flops_per_step"], method + "; model flops: the task's own"
  out = cost_lib.estimate(raw, flops, tokens, report["num_chips"],
                          report["chip"]["peak_bf16_flops"])
  out["method"] = method
  return out
