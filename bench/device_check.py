"""One GPU check of bert_jax, <= 8 minutes on one H100 / H200: one markdown table on
stdout and one JSON file.

  python bench/device_check.py [--out device_check.json]     # on the GPU
  python bench/device_check.py --smoke                       # every part, tiny, on CPU

Parts (docs/gpu.md says what to expect):
1. attention `auto` and `xla` against the float32 reference on padded, packed and causal
   bf16 rows: outputs and q/k/v gradients within bf16 tolerance, and the kernels each
   compiled program calls (custom-call targets: __cudnn$fmha... = cuDNN flash attention);
2. train steps in bf16, BERT-base S128 and S512, ModernBERT-base S1024 (its local layers'
   attention path named beside the global one's), GPT-2 small S1024: step time, MFU
   against the datasheet peak, peak device memory, one step traced into --out's
   directory (profile/<model>, TensorBoard's Profile tab);
3. the same models' steps in PyTorch (transformers, bf16 autocast, SDPA, fused AdamW)
   for a ratio, and greedy decoding tokens/s against transformers' generate (skipped
   with one line where torch is absent);
4. the real CLI end to end: a short GPT run, SIGTERM, rerun, the resumed losses equal an
   uninterrupted run's (skipped with one line where the data packages are absent).
Synthetic batches throughout; no network, no data preparation outside part 4.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path[:0] = [BENCH, ROOT]
import bench_util  # noqa: E402  pylint: disable=wrong-import-position

GPT2 = dict(vocab_size=50257, max_len=1024, hidden_size=768, num_layers=12, num_heads=12)
BERT_BASE = dict(vocab_size=30522, max_len=512, hidden_size=768, num_layers=12, num_heads=12,
                 mlp_dim=3072)
MODERNBERT_BASE = dict(vocab_size=50368, max_len=8192, hidden_size=768, num_layers=22,
                       num_heads=12, mlp_dim=1152)
TINY = dict(vocab_size=512, max_len=64, hidden_size=64, num_layers=2, num_heads=2, mlp_dim=128)
FULL_PLAN = dict(attention=(4, 1024, 12, 64), steps=10, prompt=32, new=128, batches=(1, 8),
                 train=[("bert_base_s128", "bert", BERT_BASE, 256, 128),
                        ("bert_base_s512", "bert", BERT_BASE, 32, 512),
                        ("modernbert_base_s1024", "modernbert", MODERNBERT_BASE, 32, 1024),
                        ("gpt2_small_s1024", "gpt", dict(GPT2, mlp_dim=3072), 16, 1024)])
SMOKE_PLAN = dict(attention=(2, 32, 2, 16), steps=1, prompt=8, new=4, batches=(2,),
                  train=[("bert_tiny_s16", "bert", TINY, 4, 16),
                         ("modernbert_tiny_s32", "modernbert",
                          dict(TINY, num_layers=3, local_window=8), 2, 32),
                         ("gpt_tiny_s32", "gpt", TINY, 2, 32)])
DATA_PACKAGES = ("tensorflow_datasets", "grain", "array_record", "gensim")


def note(*args) -> None:
  print("[device_check]", *args, file=sys.stderr, flush=True)


def torch_side(plan: dict, python: str) -> dict:
  """transformers' steps and generate in a subprocess (it exits before JAX takes the GPU);
  {"skipped": why} when that python has no torch / transformers."""
  probe = subprocess.run([python, "-c", "import torch, transformers"], capture_output=True)
  if probe.returncode:
    return {"skipped": f"no torch + transformers in {python}"}
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  train = []
  for name, family, size, batch, seq in plan["train"]:
    ids = rng.integers(0, size["vocab_size"], (batch, seq)).tolist()
    if family in ("bert", "modernbert"):
      labels = [[t if rng.random() < 0.15 else -100 for t in row] for row in ids]
      b = dict(input_ids=ids, labels=labels)
      if family == "bert":
        b["next_sentence_label"] = [0] * batch
    else:
      b = dict(input_ids=ids, labels=ids)
    train.append(dict(name=name, family=family, model=dict(size, mlp_dim=size.get(
        "mlp_dim", 4 * size["hidden_size"])), batch=b))
  spec = dict(train=train, steps=plan["steps"], decode=dict(
      GPT2 if plan is FULL_PLAN else TINY, batches=list(plan["batches"]),
      prompt=plan["prompt"], new=plan["new"]))
  res = subprocess.run([python, os.path.join(BENCH, "device_check_torch.py"),
                        json.dumps(spec)], capture_output=True, text=True)
  if res.returncode:
    return {"skipped": "the torch side failed: " + res.stderr.strip().splitlines()[-1]}
  return json.loads(res.stdout.strip().splitlines()[-1])


def _importable(name: str) -> bool:
  try:
    return importlib.util.find_spec(name) is not None
  except ImportError:
    return False


def cli_resume(smoke: bool, workdir: str) -> dict:
  """A short GPT run of the real CLI, SIGTERM after its first checkpoint, the same
  command again to the end, and an uninterrupted run: their per-step losses."""
  missing = [p for p in DATA_PACKAGES if not _importable(p)]
  if missing:
    return {"skipped": f"data packages absent ({', '.join(missing)}): no CLI run"}
  steps, kill_after = (12, 2) if smoke else (40, 10)  # room after the kill
  flags = [f"--config.train.num_steps={steps}", "--config.train.log_every=1",
           f"--config.train.checkpoint_every={kill_after}", "--config.train.eval_every=0",
           "--config.train.async_checkpoints=false", f"--config.data.data_dir={workdir}/data"]
  if smoke:
    flags += ["--config.train.batch_size=4", "--config.model.num_layers=1",
              "--config.model.max_len=32", "--config.data.max_seq_length=32"]

  def cmd(run):
    return [sys.executable, "-m", "bert_jax.main", "--config", "configs/gpt.py",
            "--workdir", f"{workdir}/{run}", *flags]

  def losses(run):
    with open(f"{workdir}/{run}/metrics.jsonl", encoding="utf-8") as f:
      rows = [json.loads(line) for line in f]
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}

  subprocess.run(cmd("straight"), cwd=ROOT, check=True, capture_output=True)
  proc = subprocess.Popen(cmd("resumed"), cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  ckpt = f"{workdir}/resumed/checkpoints/{kill_after}"
  while proc.poll() is None and not os.path.exists(ckpt):
    time.sleep(0.1)
  proc.send_signal(15)
  proc.wait()
  saved = [int(n) for n in os.listdir(os.path.dirname(ckpt)) if n.isdigit()]
  stopped_at = max(saved, default=0)   # < steps: the SIGTERM stopped the run early
  subprocess.run(cmd("resumed"), cwd=ROOT, check=True, capture_output=True)
  a, b = losses("straight"), losses("resumed")
  diff = max(abs(a[s] - b[s]) for s in a) if sorted(a) == sorted(b) else float("inf")
  return {"steps": steps, "sigterm_rc": proc.returncode, "stopped_at": stopped_at,
          "max_loss_diff": diff,
          "ok": stopped_at < steps and diff <= 1e-5 * max(abs(x) for x in a.values())}


def table(result: dict) -> str:
  """The markdown table of everything measured."""
  lines = ["| part | case | result | ok |", "| --- | --- | --- | --- |"]
  for r in result["attention"]:
    lines.append(f"| attention | {r['case']} {r['impl']} | kernels {', '.join(r['kernels'])};"
                 f" max rel err {r['max_rel_err']:.2e} | {'yes' if r['ok'] else 'NO'} |")
  torch = result["torch"]
  for r in result["train"]:
    theirs = torch.get("train", {}).get(r["name"])
    ratio = f"; torch {1e3 * theirs:.1f} ms, {theirs / r['step_s']:.2f}x" if theirs else ""
    mem = f"{r['peak_memory_gib']:.2f} GiB" if r["peak_memory_gib"] is not None else "n/a"
    lines.append(f"| train step | {r['name']} b{r['batch']} | {1e3 * r['step_s']:.1f} ms, MFU "
                 f"{100 * r['mfu']:.1f}%, peak {mem}{ratio}; attention {r['attention']} | "
                 f"{'yes' if r['final_loss'] == r['final_loss'] else 'NO'} |")
  for b, tps in result["decode"].items():
    theirs = torch.get("decode", {}).get(b)
    vs = f" vs transformers {theirs:.0f} ({tps / theirs:.2f}x)" if theirs else ""
    lines.append(f"| decode | greedy batch {b} | {tps:.0f} tokens/s{vs} | yes |")
  if "skipped" in torch:
    lines.append(f"| torch | - | skipped: {torch['skipped']} | - |")
  cli = result["cli"]
  lines.append("| CLI resume | gpt | " + (f"skipped: {cli['skipped']} | - |" if "skipped" in cli
               else f"SIGTERM rc {cli['sigterm_rc']} at step {cli['stopped_at']} of "
                    f"{cli['steps']}, max loss diff {cli['max_loss_diff']:.2e}"
                    f" | {'yes' if cli['ok'] else 'NO'} |"))
  return "\n".join(lines)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--smoke", action="store_true", help="every part with tiny shapes (CPU)")
  p.add_argument("--out", default="device_check.json", help="the JSON file (and its "
                 "directory: profile/<model> traces, cli/ workdirs)")
  p.add_argument("--torch_python", default=sys.executable,
                 help="a python with torch + transformers (default: this one)")
  args = p.parse_args(argv)
  plan = SMOKE_PLAN if args.smoke else FULL_PLAN
  out_dir = os.path.dirname(os.path.abspath(args.out))
  os.makedirs(out_dir, exist_ok=True)
  bench_util.header("bench/device_check.py")
  t0 = time.perf_counter()
  result = {"command": " ".join(sys.argv), "load_start": bench_util.load_line("start")}
  result["torch"] = torch_side(plan, args.torch_python)     # before JAX holds the GPU
  note("torch side:", result["torch"].get("skipped", "done"))
  import jax  # pylint: disable=g-import-not-at-top
  import device_check_parts as parts  # pylint: disable=g-import-not-at-top
  result["device"] = f"{jax.devices()[0].device_kind} ({jax.default_backend()}), jax " \
                     f"{jax.__version__}"
  result["attention"] = parts.check_attention(*plan["attention"])
  note("attention done")
  result["train"] = []
  for name, family, size, batch, seq in plan["train"]:
    config = parts.step_config(family, size, batch, seq)
    result["train"].append(parts.time_train_step(name, config, family, plan["steps"],
                                                 os.path.join(out_dir, "profile")))
    note(name, f"{1e3 * result['train'][-1]['step_s']:.1f} ms")
  result["decode"] = parts.decode_tokens_per_s(GPT2 if not args.smoke else TINY,
                                               plan["batches"], plan["prompt"], plan["new"])
  result["cli"] = cli_resume(args.smoke, os.path.join(out_dir, "cli"))
  result["seconds"] = time.perf_counter() - t0
  result["load_end"] = bench_util.load_line("end")
  text = table(result)
  print(f"device: {result['device']}\n\n{text}\n\n{result['load_end']}, "
        f"{result['seconds']:.0f} s")
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1, default=str)
  bad = [r for r in result["attention"] if not r["ok"]]
  if bad or not result["cli"].get("ok", True):
    sys.exit(f"device_check: {len(bad)} attention case(s) out of tolerance"
             + ("" if result["cli"].get("ok", True) else "; the resumed CLI run differs"))


if __name__ == "__main__":
  main()
