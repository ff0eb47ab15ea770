"""Fuzzed config overrides through the real CLI parser (bert_jax.main.parse_flags), then
the code that consumes them (train_and_evaluate's setup, optim.make_optimizer): a bad
value is one ValueError naming the key and what it may hold, never a traceback."""
import math
import os
import pathlib
import subprocess
import sys
from unittest import mock

import jax
import pytest
from hypothesis import example, given, strategies as st

from bert_jax import main as cli
from bert_jax.train import loop, optim
from tests.fuzz.strategies import FUZZ

CONFIG = pathlib.Path(__file__).resolve().parents[2] / "configs" / "bert_tiny.py"
OPTIMIZERS = ("adamw", "lamb", "sgd")


class _Reached(Exception):
  """Raised by the fake task: the config passed every check before the task is used."""


class _Task:
  def prepare(self, workdir):
    raise _Reached


def _reset_flags():
  cli.FLAGS.unparse_flags()
  for name in [n for n in cli.FLAGS if n.startswith("config.")]:
    delattr(cli.FLAGS, name)  # config_flags defines one flag per override, per parse


@pytest.fixture(autouse=True, scope="module")
def _leave_flags_unparsed():
  yield
  _reset_flags()  # other tests in this process see absl's flags as never parsed


def parse(*overrides):
  """parse_flags exactly as `python -m bert_jax.main` runs it, once per call."""
  argv = ["bert_jax.main", f"--config={CONFIG}", "--workdir=unused", *overrides]
  _reset_flags()
  with mock.patch.object(sys, "argv", argv):  # config_flags reads overrides from sys.argv
    cli.parse_flags(argv)
  return cli.FLAGS.config


def expected_mesh(shape, n):
  """The (data, fsdp, tensor) shape the mesh should resolve to, or None if invalid.

  A shape with one -1 that cannot exist on n devices is fitted (parallel.fit_mesh_shape's
  documented rule): each fixed axis, left to right, shrinks to its largest divisor that
  the devices left still divide, and the -1 takes the rest."""
  if len(shape) != 3 or shape.count(-1) > 1 or any(s <= 0 and s != -1 for s in shape):
    return None
  known = math.prod(s for s in shape if s != -1)
  resolved = [n // known if s == -1 else s for s in shape]
  if math.prod(resolved) == n:
    return tuple(resolved)
  if -1 not in shape:
    return None
  fitted, rest = [], n
  for s in shape:
    if s != -1:
      fitted.append(max(d for d in range(1, s + 1) if s % d == 0 and rest % d == 0))
      rest //= fitted[-1]
    else:
      fitted.append(-1)
  return tuple(rest if s == -1 else s for s in fitted)


@FUZZ
@given(batch=st.integers(-64, 64),
       mesh=st.lists(st.integers(-2, 9), max_size=4),
       optimizer=st.one_of(st.sampled_from(OPTIMIZERS),
                           st.text("abcdefghijklmnopqrstuvwxyz_-0123456789", max_size=8)))
@example(batch=-1, mesh=[-1, 1, 1], optimizer="adamw")  # the issue's --config.train.batch_size=-1
@example(batch=32, mesh=[3, 1, 1], optimizer="adamw")  # 3 does not divide 8 devices
@example(batch=12, mesh=[8, 1, 1], optimizer="adamw")  # 12 not divisible by 8 data-parallel
@example(batch=32, mesh=[-1, 1, 1], optimizer="adagrad")  # unknown optimizer
@example(batch=32, mesh=[0, -1, 1], optimizer="adamw")  # was a ZeroDivisionError
@example(batch=16, mesh=[2, -1, 2], optimizer="lamb")  # valid: (2, 2, 2), 4-way data parallel
@example(batch=0, mesh=[3, -1, 1], optimizer="adamw")  # fitted to (1, 8, 1); then batch 0
@example(batch=16, mesh=[1, 3, -1], optimizer="sgd")  # fitted to (1, 1, 8): 1-way data
def test_overrides(tmp_path, batch, mesh, optimizer):
  config = parse(f"--config.train.batch_size={batch}",
                 f"--config.mesh_shape=({','.join(map(str, mesh))}{',' if len(mesh) == 1 else ''})",
                 f"--config.train.optimizer={optimizer}")
  assert config.train.batch_size == batch and tuple(config.mesh_shape) == tuple(mesh)
  resolved = expected_mesh(list(mesh), jax.device_count())
  try:
    loop.train_and_evaluate(config, str(tmp_path / "workdir"), _Task())
  except _Reached:
    assert resolved is not None and batch > 0 and batch % (resolved[0] * resolved[1]) == 0
  except ValueError as e:
    message = str(e)
    assert len(message.splitlines()) == 1, message
    if resolved is None:
      assert "config.mesh_shape" in message and "positive integers" in message, message
    else:
      assert batch <= 0 or batch % (resolved[0] * resolved[1]), message
      assert "train.batch_size" in message and "positive multiple" in message, message
  if optimizer in OPTIMIZERS:
    optim.make_optimizer(config.train, total_steps=10)
  else:
    with pytest.raises(ValueError, match=r"train.optimizer .*: adamw, lamb, sgd"):
      optim.make_optimizer(config.train, total_steps=10)


@pytest.mark.parametrize("override, needle", [
    ("--config.train.batch_size=abc", "batch_size"),
    ("--config.train.batchsize=8", "batchsize"),
])
def test_unparsable_override_is_one_line_exit_2(capsys, override, needle):
  with pytest.raises(SystemExit) as exit_info:
    parse(override)
  assert exit_info.value.code == 2
  err = capsys.readouterr().err.strip()
  assert len(err.splitlines()) == 1 and needle in err, err


def test_cli_negative_batch_size_exits_2_with_one_line(tmp_path):
  """The issue's `--config.train.batch_size=-1`, end to end (the one subprocess here)."""
  proc = subprocess.run(
      [sys.executable, "-m", "bert_jax.main", "--config",
       str(CONFIG.parent / "finetune_classification.py"), "--workdir", str(tmp_path / "w"),
       "--config.train.batch_size=-1"],
      capture_output=True, text=True, timeout=300, check=False,
      env={**os.environ, "JAX_PLATFORMS": "cpu"})
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "train.batch_size=-1 must be a positive multiple" in errors[0], (
      proc.stderr[-2000:])
  # Once: the message is not repeated as an absl log line above it.
  assert proc.stderr.count("train.batch_size=-1 must be") == 1, proc.stderr[-2000:]
