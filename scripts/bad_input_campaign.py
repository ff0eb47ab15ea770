"""Settings a person types by mistake and inputs that are broken, through the real CLIs:
does every one end in one clear line, with not one byte of what was on disk lost?

  python scripts/bad_input_campaign.py                 # every case, a table and a summary
  python scripts/bad_input_campaign.py --cases export_over_a_model,vocab_with_a_duplicate

Each case builds what a user would have on disk (a trained-looking workdir, a Hugging
Face directory, a CSV), records the sha256 of every file under its directory, runs one
command (`python -m bert_jax.main`, `bert_jax.export`, `bert_jax.embed`, ...) and checks:
the exit status is 2, stderr holds exactly one `error:` line matching the case's pattern
and no traceback, and every file is still there with the same bytes (bytes lost: 0).
tests/test_bad_input_campaign.py runs every case; docs/reliability.md lists them with
what each gets. The cases run in a fresh directory each (under --root, removed after).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_BERT = os.path.join(ROOT, "tests", "testdata", "hf", "tiny_bert")
CORPUS = os.path.join(ROOT, "tests", "testdata", "data", "tiny_corpus.txt")
EXPORTED = os.path.join(ROOT, "tests", "testdata", "hf", "export", "classification")


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  what: str                        # the mistake, as docs/reliability.md lists it
  gets: str                        # what the user gets
  build: Callable[[str], list]     # directory -> the command's arguments
  error: str                       # a regex the one error line must match


def _main(*flags: str) -> list:
  return ["-m", "bert_jax.main", *flags]


def _pretraining(d: str, *extra: str) -> list:
  return _main("--config", "configs/bert_tiny.py", "--workdir", os.path.join(d, "run"),
               f"--config.data.data_dir={d}/data", "--config.data.corpus=text",
               f"--config.data.text_files={CORPUS}", *extra)


def _workdir_with_a_checkpoint(d: str, meta: dict | None = None) -> str:
  """A workdir holding one checkpoint step's meta (what a restore reads first)."""
  run = os.path.join(d, "run")
  step = os.path.join(run, "checkpoints", "4", "meta")
  os.makedirs(step)
  with open(os.path.join(step, "metadata"), "w", encoding="utf-8") as f:
    json.dump(meta or {"task": "bert_pretraining", "format": 1}, f)
  with open(os.path.join(run, "metrics.jsonl"), "w", encoding="utf-8") as f:
    f.write('{"step": 4, "train/loss": 5.0}\n')
  return run


def _hf_copy(d: str, name: str = "hf") -> str:
  out = os.path.join(d, name)
  shutil.copytree(TINY_BERT, out)
  return out


def _keep_0(d):
  _workdir_with_a_checkpoint(d)
  return _pretraining(d, "--config.train.keep_checkpoints=0")


def _checkpoint_every_0(d):
  _workdir_with_a_checkpoint(d)
  return _pretraining(d, "--config.train.checkpoint_every=0")


def _init_from_is_workdir(d):
  hf = _hf_copy(d)
  return _main("--config", "configs/finetune_classification.py", "--workdir", hf,
               f"--config.init_from={hf}")


def _workdir_in_use(d):
  run = _workdir_with_a_checkpoint(d)
  with open(os.path.join(run, ".bert_jax.lock"), "w", encoding="utf-8") as f:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    json.dump({"pid": os.getpid(), "host": socket.gethostname(), "started": now,
               "heartbeat": now}, f)  # this campaign's own process: alive, beating
  return _pretraining(d)


def _workdir_is_a_file(d):
  with open(os.path.join(d, "run"), "w", encoding="utf-8") as f:
    f.write("notes\n")
  return _pretraining(d)


def _workdir_not_writable(d):
  del d  # /sys refuses a new directory even to root: a read-only place to write to
  return _main("--config", "configs/bert_tiny.py", "--workdir", "/sys/bert_jax_campaign_run")


def _unknown_key(d):
  _workdir_with_a_checkpoint(d)
  return _pretraining(d, "--config.train.learning_rat=1e-3")


def _predict_over_input(d):
  path = os.path.join(d, "texts.csv")
  with open(path, "w", encoding="utf-8") as f:
    f.write("sentence\nthe film was fine\n")
  return _main("--config", "configs/finetune_classification.py", "--workdir",
               os.path.join(d, "run"), "--config.mode=predict",
               f"--config.predict.input_file={path}", f"--config.predict.output_file={path}")


def _predict_missing_workdir(d):
  return _main("--config", "configs/finetune_classification.py", "--workdir",
               os.path.join(d, "never_trained"), "--config.mode=predict",
               f"--config.predict.input_file={_texts(d)}")


def _rerun_with_another_tokenizer(d):
  """A fine-tuning workdir trained with tiny_bert's vocabulary, rerun from MiniLM's."""
  sys.path.insert(0, ROOT)
  from bert_jax.data import tokenizer  # pylint: disable=g-import-not-at-top
  tok_dir = os.path.join(d, "run", "tokenizer")
  os.makedirs(tok_dir)
  tokenizer.keep_or_write(tokenizer.load_tokenizer(os.path.join(TINY_BERT, "vocab.txt")),
                          os.path.join(tok_dir, "tokenizer.json"), "tiny_bert")
  return _main("--config", "configs/finetune_classification.py:polarity", "--workdir",
               os.path.join(d, "run"), "--config.data.max_train_examples=16")


def _missing_train_file(d):
  return _main("--config", "configs/finetune_classification.py", "--workdir",
               os.path.join(d, "run"), "--config.data.source=file",
               f"--config.data.train_file={d}/train.csv", f"--config.data.eval_file={d}/eval.csv")


def _newer_checkpoint(d):
  _workdir_with_a_checkpoint(d, {"task": "bert_pretraining", "format": 99,
                                 "code_version": "9.0.0"})
  return ["-c", "from bert_jax.checkpoint import restore_errors as r, read; import sys\n"
          f"try:\n  r.check_format(read.read_meta('{d}/run/checkpoints/4'), 'run/4')\n"
          "except ValueError as e:\n  print(f'error: {e}', file=sys.stderr); sys.exit(2)"]


def _no_restorable_checkpoint(d):
  _workdir_with_a_checkpoint(d)  # a step with its meta only: its state is gone
  return _pretraining(d, "--config.train.num_steps=2")


def _export_over_a_model(d):
  out = _hf_copy(d, "published")
  return ["-m", "bert_jax.export", "--workdir", _exportable(d), "--output", out]


def _exportable(d: str) -> str:
  """A workdir with a real classification checkpoint (the export tests' case)."""
  sys.path.insert(0, ROOT)
  from tests import export_cases  # pylint: disable=g-import-not-at-top
  workdir = os.path.join(d, "run")
  export_cases.make_workdir("classification", workdir)
  return workdir


def _export_into_workdir(d):
  workdir = _exportable(d)
  return ["-m", "bert_jax.export", "--workdir", workdir, "--output", workdir, "--overwrite"]


def _export_no_checkpoint(d):
  os.makedirs(os.path.join(d, "run", "checkpoints"))
  return ["-m", "bert_jax.export", "--workdir", os.path.join(d, "run"), "--output",
          os.path.join(d, "hf")]


def _truncated_safetensors(d):
  hf = _hf_copy(d)
  path = os.path.join(hf, "model.safetensors")
  with open(path, "rb") as f:
    data = f.read()
  with open(path, "wb") as f:
    f.write(data[: len(data) // 2])
  return ["-m", "bert_jax.embed", "--checkpoint", hf, "--input", _texts(d), "--output",
          os.path.join(d, "out.npy")]


def _texts(d: str) -> str:
  path = os.path.join(d, "texts.txt")
  with open(path, "w", encoding="utf-8") as f:
    f.write("hello world\n")
  return path


def _embed_over_input(d):
  path = _texts(d)
  return ["-m", "bert_jax.embed", "--checkpoint", TINY_BERT, "--input", path, "--output", path]


def _vocab_with_a_duplicate(d):
  path = os.path.join(d, "vocab.txt")
  with open(os.path.join(TINY_BERT, "vocab.txt"), encoding="utf-8") as f:
    lines = f.read().splitlines()
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines + [lines[-1]]) + "\n")
  return _pretraining(d, f"--config.data.vocab_path={path}")


def _translate_over_input(d):
  path = _texts(d)
  os.makedirs(os.path.join(d, "run"))
  return ["-m", "bert_jax.translate", "--workdir", os.path.join(d, "run"), "--input", path,
          "--output", path]


CASES = [
    Case("keep_checkpoints_0", "`--config.train.keep_checkpoints=0` on a workdir with "
         "checkpoints", "refused before anything runs", _keep_0,
         r"^error: train\.keep_checkpoints=0; expected an integer >= 1"),
    Case("checkpoint_every_0", "`--config.train.checkpoint_every=0`", "refused at start",
         _checkpoint_every_0, r"^error: train\.checkpoint_every=0; expected a number >= 1"),
    Case("init_from_is_workdir", "`--workdir` the Hugging Face directory of `init_from`",
         "refused: the run would write over what it reads", _init_from_is_workdir,
         r"^error: --workdir .*/hf is config\.init_from .*/hf: the run would write over"),
    Case("workdir_in_use", "a second run on a workdir another run holds",
         "refused naming the first (pid, host, start)", _workdir_in_use,
         r"^error: --workdir .*/run is in use by another run \(pid \d+ on "),
    Case("workdir_is_a_file", "`--workdir` that is a file", "refused",
         _workdir_is_a_file, r"^error: --workdir .*/run is a file, not a directory"),
    Case("workdir_not_writable", "a `--workdir` where this user may not write",
         "one line naming the path", _workdir_not_writable,
         r"^error: cannot write /sys/bert_jax_campaign_run: Operation not permitted"),
    Case("unknown_config_key", "a misspelled `--config.train.learning_rat`",
         "refused naming it", _unknown_key, r"^error: unknown config key"),
    Case("predict_over_input", "predict with `output_file` equal to `input_file`",
         "refused", _predict_over_input,
         r"^error: config\.predict\.output_file .*texts\.csv is config\.predict\.input_file"),
    Case("predict_missing_workdir", "predict with a `--workdir` that was never trained",
         "one line: train first", _predict_missing_workdir,
         r"^error: no checkpoint in .*never_trained/checkpoints: train the task first"),
    Case("rerun_with_another_tokenizer", "a fine-tuning rerun whose `init_from` has "
         "another tokenizer than the workdir's", "refused naming both, before any write",
         _rerun_with_another_tokenizer,
         r"^error: .*run/tokenizer/tokenizer\.json \(\d+ tokens\) is another tokenizer than "
         r"this run's \(from .*, 30522 tokens\)"),
    Case("missing_train_file", "`data.train_file` that does not exist", "named",
         _missing_train_file, r"^error: config\.data\.train_file: .*train\.csv does not exist"),
    Case("newer_checkpoint", "a checkpoint written by newer code (format 99)",
         "one line naming both versions", _newer_checkpoint,
         r"^error: checkpoint run/4 was written in checkpoint format 99 by bert_jax 9\.0\.0"),
    Case("no_restorable_checkpoint", "a workdir whose only checkpoint lost its state files",
         "one line naming the steps, nothing moved", _no_restorable_checkpoint,
         r"^error: none of the checkpoints \[4\] in .* could be restored"),
    Case("export_over_a_model", "`bert_jax.export --output` a directory holding a model",
         "refused unless `--overwrite`", _export_over_a_model,
         r"^export: error: --output .*/published already holds a model \(config\.json\)"),
    Case("export_into_workdir", "`bert_jax.export --output` the workdir itself",
         "refused, even with `--overwrite`", _export_into_workdir,
         r"^export: error: --output .*/run is or holds the workdir"),
    Case("export_no_checkpoint", "export of a workdir without a checkpoint", "named",
         _export_no_checkpoint, r"^export: error: no checkpoint in .*/run/checkpoints"),
    Case("truncated_safetensors", "a truncated model.safetensors", "named, with the fix",
         _truncated_safetensors,
         r"^(embed: )?error: .*model\.safetensors is not a readable safetensors file"),
    Case("embed_over_input", "`bert_jax.embed --output` equal to `--input`", "refused",
         _embed_over_input, r"^(embed: )?error: --output .* is the --input"),
    Case("vocab_with_a_duplicate", "a vocab.txt with a token on two lines",
         "named with both line numbers", _vocab_with_a_duplicate,
         r"^error: .*vocab\.txt:\d+: token .* again \(first on line \d+\)"),
    Case("translate_over_input", "`bert_jax.translate --output` equal to `--input`",
         "refused", _translate_over_input, r"^translate: error: --output .* is the --input"),
]
BY_NAME = {c.name: c for c in CASES}


def digests(root: str) -> dict:
  out = {}
  for d, _, files in os.walk(root):
    for name in files:
      path = os.path.join(d, name)
      with open(path, "rb") as f:
        out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
  return out


def run_case(case: Case, root: str) -> dict:
  """Builds and runs one case in a fresh directory; its row (problems: [] when it holds)."""
  d = tempfile.mkdtemp(prefix=f"{case.name}-", dir=root)
  args = case.build(d)
  before = digests(d)
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=600, check=False)
  after = digests(d)
  lost = {k for k in before if after.get(k) != before[k]}
  lost_bytes = sum(os.path.getsize(os.path.join(d, k)) if os.path.exists(os.path.join(d, k))
                   else 0 for k in lost)
  errors = [l for l in proc.stderr.splitlines() if re.match(r"^(\w+: )?error:", l)]
  problems = []
  if proc.returncode != 2:
    problems.append(f"exit {proc.returncode}")
  if len(errors) != 1 or not re.match(case.error, errors[0]):
    problems.append(f"error lines {errors!r}")
  if "Traceback" in proc.stderr:
    problems.append("a traceback")
  if lost:
    problems.append(f"changed or lost: {sorted(lost)}")
  shutil.rmtree(d, ignore_errors=True)
  return {"case": case.name, "files": len(before), "lost_files": len(lost),
          "lost_bytes": lost_bytes, "traceback": "Traceback" in proc.stderr,
          "error": errors[0] if errors else proc.stderr[-300:], "problems": problems}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--cases", default=",".join(BY_NAME))
  p.add_argument("--root", default=None, help="where the cases' directories go (a temp dir)")
  a = p.parse_args(argv)
  unknown = [n for n in a.cases.split(",") if n not in BY_NAME]
  if unknown:
    p.error(f"unknown --cases {unknown}; known: {', '.join(BY_NAME)}")
  root = a.root or tempfile.mkdtemp(prefix="bad_input_")
  print("| case | files checked | lost | traceback | the one line |\n| --- | --- | --- | --- | --- |")
  rows = []
  for name in a.cases.split(","):
    row = run_case(BY_NAME[name], root)
    rows.append(row)
    flag = "" if not row["problems"] else f" **FAILED: {'; '.join(row['problems'])}**"
    print(f"| {name} | {row['files']} | {row['lost_bytes']} bytes | "
          f"{'yes' if row['traceback'] else 'no'} | {row['error'][:120]}{flag} |", flush=True)
  bad = [r for r in rows if r["problems"]]
  print(f"{len(rows)} cases, {sum(r['files'] for r in rows)} files checked, "
        f"{sum(r['lost_bytes'] for r in rows)} bytes lost, "
        f"{sum(r['traceback'] for r in rows)} tracebacks, {len(bad)} failed")
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
