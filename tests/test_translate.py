"""The translate CLI: line i -> line i, bad input counted, bad workdirs a clear exit 2."""
import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import translate
from bert_jax.models.seq2seq import Transformer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _cli(*args, stdin=b""):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", "bert_jax.translate", *args], input=stdin,
                        capture_output=True, env=env, cwd=ROOT, timeout=600)


def test_workdir_without_a_checkpoint_is_exit_2(tmp_path):
  got = _cli("--workdir", str(tmp_path), "--input", "-")
  assert got.returncode == 2
  assert b"no checkpoint in" in got.stderr and b"configs/translation.py" in got.stderr


def test_a_checkpoint_of_another_task_is_refused(tmp_path):
  meta = tmp_path / "checkpoints" / "5" / "meta"
  meta.mkdir(parents=True)
  (meta / "metadata").write_text(json.dumps({"task": "bert_pretraining"}))
  with pytest.raises(translate.TranslateError, match="'bert_pretraining' checkpoint, not a "
                     "translation one"):
    translate.checkpoint_dir(str(tmp_path), "best")


def test_bad_lines_are_counted_and_keep_their_place(numbers_workdir, tmp_path):
  workdir, _ = numbers_workdir
  task, params, step_dir = translate.load(str(workdir), "latest")
  assert step_dir.endswith(os.path.join("checkpoints", "2"))
  with pytest.raises(translate.TranslateError, match="--checkpoint 7"):
    translate.load(str(workdir), "7")
  src = tmp_path / "in.de"
  src.write_bytes(b"dreihunderteinundzwanzig\n\n" + b"siebzehn" * 30 + b"\nzw\xffei\n   \n")
  texts, log = translate.translate(task, params, str(src), beam_size=2, alpha=0.6,
                                   batch_size=4)
  assert len(texts) == 5 and texts[1] == "" and texts[4] == ""
  assert log.skipped["empty_line"] == 2 and log.kept == 3
  assert log.notes["truncated"] == 1 and log.notes["non_utf8_replaced"] == 1


def test_matmul_dtype_overrides_the_checkpoints_model(numbers_workdir):
  """--matmul_dtype bfloat16 reaches the model that decodes, and nothing else changes."""
  workdir, _ = numbers_workdir
  f32, params, _ = translate.load(str(workdir), "latest")
  bf16, params_bf16, _ = translate.load(str(workdir), "latest", "bfloat16")
  assert f32.model_config.matmul_dtype is None
  assert bf16.model_config == f32.model_config.replace(matmul_dtype="bfloat16")
  src = jnp.asarray([[5, 6, 7, 2]], jnp.int32)
  logits = [Transformer(t.model_config.replace(deterministic=True)).apply({"params": p}, src, src)
            for t, p in ((f32, params), (bf16, params_bf16))]
  # bf16 operands round each product's inputs to 8 bits of mantissa: close, not equal.
  assert not np.array_equal(logits[0], logits[1])
  np.testing.assert_allclose(logits[1], logits[0], atol=0.1, rtol=0.05)


def test_cli_reads_stdin_and_writes_stdout_line_for_line(numbers_workdir):
  workdir, _ = numbers_workdir
  got = _cli("--workdir", str(workdir), "--input", "-", "--output", "-", "--beam_size", "1",
             "--checkpoint", "best", stdin="eins\n\nzweihundert\n".encode())
  assert got.returncode == 0, got.stderr.decode()[-2000:]
  lines = got.stdout.decode("utf-8").split("\n")
  assert len(lines) == 4 and lines[1] == "" and lines[3] == ""  # 3 lines + final newline
  assert b"empty_line" in got.stderr


def test_write_creates_the_output_directory(tmp_path):
  """--output into a directory not made yet: was a FileNotFoundError traceback."""
  out = tmp_path / "new" / "dir" / "test.hyp"
  translate._write(str(out), ["one", "two"])
  assert out.read_text(encoding="utf-8") == "one\ntwo\n"
