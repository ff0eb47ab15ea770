"""The stages' parts of bench/time_to_quality/time_to_quality.py: the data (the prepared
corpus and the one held-out masked set), the workers' specs and processes, the runs taking
turns on the cores, and the tuning of transformers' recipe.
"""
from __future__ import annotations

import json
import os
import sys
import time

import bench_util
import scorer as ttq_scorer

# modernbert: configs/modernbert.py:tiny on :demo's data (modernbert_demo.py).
CONFIGS = {"bert": "configs/bert_tiny.py:bert", "demo": "configs/bert_tiny.py:demo",
           "modernbert": "configs/modernbert.py:tiny"}
BASE_DIMS = {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "mlp_dim": 3072}
TUNED = {"warmup_ratio": 0.06, "per_device_train_batch_size": 32, "fit_steps": True}
STAGES = ("tune", "runs", "base")
LABELS = {"hf_defaults": "transformers run_mlm defaults (lr 5e-5, batch 8)",
          "ours_bert": "ours configs/bert_tiny.py:bert",
          "hf_tuned": "transformers tuned ({lr}, {schedule}, 6% warmup, batch 32)",
          "ours_demo": "ours configs/bert_tiny.py:demo (4,096 vocab)"}


# ------------------------------------------------------------------------------ data
def prepare(name: str, data_dir: str):
  """(config, PreparedData) of a CONFIGS entry, prepared (or read from the cache)."""
  import ours_worker as ttq_ours_worker  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.pretraining import PretrainingTask  # pylint: disable=g-import-not-at-top
  config = ttq_ours_worker.load_config(os.path.join(bench_util.ROOT, CONFIGS[name]),
                                       {"data.data_dir": data_dir})
  task = PretrainingTask(config)
  task.prepare("")
  return config, next(iter(task._prepared.values()))  # pylint: disable=protected-access


def validation_documents(documents_dir: str) -> list[list[str]]:
  """The held-out documents, each as its non-empty lines (sentences)."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  builder = tfds.builder_from_directory(documents_dir)
  if "validation" not in builder.info.splits:
    raise bench_util.BenchError(f"{documents_dir} has no validation split to score on")
  source = builder.as_data_source(split="validation")
  return [[s for s in source[i]["text"].decode("utf-8").split("\n") if s.strip()]
          for i in range(len(source))]


def masked_set(prepared, docs: list[list[str]], out: str, max_len: int) -> str:
  """OUT/masked_<vocab>.npz: the fixed set for this vocabulary, drawn once and reused."""
  from bert_jax import demo_report  # pylint: disable=g-import-not-at-top
  path = os.path.join(out, f"masked_{prepared.vocab_size}.npz")
  stamp = path + ".json"  # which vocabulary it was drawn on: a stale set is redrawn
  with open(prepared.vocab_path, "rb") as f:
    vocab = f.read().decode("utf-8")
  if os.path.exists(path) and os.path.exists(stamp):
    with open(stamp, encoding="utf-8") as f:
      if json.load(f).get("vocab") == vocab:
        return path
  tok = prepared.tokenizer()
  tokenized = [[e.ids for e in tok.encode_batch(d, add_special_tokens=False)] for d in docs]
  sp = prepared.special
  rows = ttq_scorer.document_rows(tokenized, max_len, sp.cls, sp.sep)
  ttq_scorer.save(path, ttq_scorer.draw_masked_set(
      rows, max_len, prepared.vocab_size, demo_report.special_ids(tok), sp.mask, sp.pad))
  with open(stamp, "w", encoding="utf-8") as f:
    json.dump({"vocab": vocab, "rows": len(rows), "seed": 0}, f)
  return path


# ------------------------------------------------------------------------------ runs
def worker_argv(kind: str, name: str, spec: dict, args) -> tuple[list, str]:
  """(argv, curve path) of one run's worker, its spec written to OUT/<name>.spec.json."""
  spec_path = os.path.join(args.out, f"{name}.spec.json")
  spec = {**spec, "curve": os.path.join(args.out, f"{name}.curve.jsonl")}
  with open(spec_path, "w", encoding="utf-8") as f:
    json.dump(spec, f)
  python = args.torch_python if kind == "hf" else sys.executable
  script = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{kind}_worker.py")
  return [python, script, "--spec", spec_path], spec["curve"]


def finished(name: str, summary: dict, curve_path: str) -> dict:
  """{"summary", "curve"} of a run that ended, and its line."""
  curve = []
  if os.path.exists(curve_path):
    with open(curve_path, encoding="utf-8") as f:
      curve = [json.loads(l) for l in f]
  acc = f", final acc {curve[-1]['accuracy']:.4f}" if curve else ""
  print(f"{name}: {summary['steps']} steps in {summary['seconds']:.0f} s ({summary['stopped']})"
        f", {summary['steady_tokens_per_s']:,.0f} tokens/s{acc}; "
        f"{bench_util.load_line('after')}", flush=True)
  return {"summary": summary, "curve": curve}


def run_worker(kind: str, name: str, spec: dict, args) -> dict:
  """One run in its own process, alone; returns {"summary", "curve"} and prints one line."""
  argv, curve_path = worker_argv(kind, name, spec, args)
  print(f"{name}: {bench_util.load_line('before')}", flush=True)
  return finished(name, bench_util.run_json(argv, name), curve_path)


def run_interleaved(runs: list, args, gap_s: float = 0.5, on_finish=None) -> dict:
  """The runs [(name, kind, spec)] taking turns on the cores: {name: {"summary", "curve",
  "slices"}}.

  Each worker is started, prepared and (fit_steps) probed while the others wait, so a
  probe measures its run alone. Then, in rounds, each run in turn trains one slice of
  its spec's every_s seconds of its own clock and is scored (bench_util.pause), until its
  budget or schedule ends. Every run so meets the machine's hour as the others do (this
  machine's throughput drifted by up to a third between idle hours, torch's more than
  ours, which decided ratios run one after the other). A slice is (round, step,
  seconds, tokens) at its end: per-slice rates of runs in the same round are the
  interleaved comparison (slice_ratios). `gap_s` between turns lets a finished turn's
  thread pools go idle (OpenMP spins a while after its last op). `on_finish(name,
  result)` is called as each run ends (the driver saves it then, not after all).
  """
  workers, curves, out = {}, {}, {}
  try:
    for name, kind, spec in runs:
      argv, curves[name] = worker_argv(kind, name, {**spec, "interleave": True}, args)
      print(f"{name}: starting; {bench_util.load_line('before')}", flush=True)
      workers[name] = bench_util.Worker(argv, name)
      ready = workers[name].read()  # prepared, probed and built, alone
      print(f"{name}: ready, {ready['num_steps']} steps scheduled", flush=True)
      out[name] = {"slices": []}
    active, round_ = [name for name, _, _ in runs], 0
    while active:
      for name in list(active):
        got = workers[name].ask(cmd="continue")
        if "stopped" in got:  # its last slice: the summary
          got_slice = {"round": round_, "step": got["steps"], "seconds": got["seconds"],
                       "tokens": got["tokens"]}
          out[name].update(finished(name, got, curves[name]))
          active.remove(name)
        else:
          got_slice = {"round": round_, **got}
        out[name]["slices"].append(got_slice)
        if "stopped" in got and on_finish:
          on_finish(name, out[name])
        time.sleep(gap_s)
      round_ += 1
  finally:
    for w in workers.values():
      w.close()
  return out


def slice_ratios(ours: list, theirs: list, skip_rounds: int = 1) -> list:
  """Per round where both ran a slice, our tokens/s in it over theirs; the first
  `skip_rounds` rounds are left out (our first slice holds the compile)."""
  def rates(slices):
    got, prev = {}, {"seconds": 0.0, "tokens": 0}
    for s in slices:
      dt = s["seconds"] - prev["seconds"]
      if s["round"] >= skip_rounds and dt > 0:
        got[s["round"]] = (s["tokens"] - prev["tokens"]) / dt
      prev = s
    return got
  a, b = rates(ours), rates(theirs)
  return [a[r] / b[r] for r in sorted(set(a) & set(b))]


def hf_spec(data: dict, recipe: dict, budget: float, every: float, args, **extra) -> dict:
  return {"vocab": data["vocab"], "train_text": data["train_text"],
          "masked": data["masked_bert"], "check": data["check"], "model": data["model"],
          "recipe": recipe, "budget_s": budget, "every_s": every, "threads": args.threads,
          **extra}


def ours_spec(name: str, data: dict, budget: float, every: float, args, **extra) -> dict:
  return {"config": os.path.join(bench_util.ROOT, CONFIGS[name]),
          "overrides": {"data.data_dir": args.data_dir, **args.ours_overrides,
                        **extra.pop("overrides", {})},
          "workdir": os.path.join(args.out, f"ours_{name}"),
          "masked": data[f"masked_{name}"], "budget_s": budget, "every_s": every,
          "fit_steps": args.fit_steps, **extra}


def tune(data: dict, args) -> tuple[dict, list]:
  """The tuned recipe: the best final accuracy over lr x schedule at --tune_budget."""
  trials = []
  for schedule in args.tune_schedules.split(","):
    for lr in map(float, args.tune_lrs.split(",")):
      recipe = {**TUNED, "learning_rate": lr, "lr_scheduler_type": schedule}
      name = f"tune_{schedule}_lr{lr:g}"
      got = run_worker("hf", name, hf_spec(data, recipe, args.tune_budget, args.tune_budget,
                                          args), args)
      trials.append({"name": name, "recipe": recipe,
                     "accuracy": got["curve"][-1]["accuracy"], **got["summary"]})
  best = max(trials, key=lambda t: t["accuracy"])
  print(f"tuning: best {best['name']} ({best['accuracy']:.4f})", flush=True)
  return best["recipe"], trials


def prepare_data(args) -> dict:
  """Stage 1 (module docstring): the specs' data fields."""
  from bert_jax import demo_report  # pylint: disable=g-import-not-at-top
  config, bert = prepare("bert", args.data_dir)
  _, demo = prepare("demo", args.data_dir)
  if bert.documents_dir != demo.documents_dir:
    raise bench_util.BenchError("the :bert and :demo configs prepared different documents")
  lines = demo_report.train_lines(bert.documents_dir)
  train_text = os.path.join(args.out, "train.txt")
  text = "".join(l + "\n" for l in lines)
  if not os.path.exists(train_text) or open(train_text, encoding="utf-8").read() != text:
    with open(train_text + ".tmp", "w", encoding="utf-8") as f:  # a reader never sees half
      f.write(text)
    os.replace(train_text + ".tmp", train_text)
  docs = validation_documents(bert.documents_dir)
  max_len = int(config.data.max_seq_length)
  sample = lines[:200]
  m = config.model
  data = {"vocab": bert.vocab_path, "train_text": train_text,
          "masked_bert": masked_set(bert, docs, args.out, max_len),
          "masked_demo": masked_set(demo, docs, args.out, max_len),
          "check": [sample, [e.ids for e in bert.tokenizer().encode_batch(
              sample, add_special_tokens=False)]],
          "model": {"vocab_size": bert.vocab_size, "hidden_size": m.hidden_size,
                    "num_layers": m.num_layers, "num_heads": m.num_heads,
                    "mlp_dim": m.mlp_dim}}
  for name in ("bert", "demo"):
    held = ttq_scorer.load(data[f"masked_{name}"])
    print(f"data: {len(lines)} training lines; {len(docs)} held-out documents -> "
          f"{len(held['input_ids'])} rows, {int(held['weights'].sum())} masked positions "
          f"({name}'s {(bert if name == 'bert' else demo).vocab_size} vocabulary)", flush=True)
  return data
