"""data/hosts.py: preparation on a pod without a shared filesystem. Two JAX processes on
127.0.0.1 (tests/data/pod_host.py), data_dir on the fake GCS bucket of tests/test_gcs.py,
a cache_dir each: process 0 prepares and uploads, process 1 waits for its marker and
copies the same files. Then the failure modes: process 0's error, its death, its silence."""
import json
import os
import subprocess
import sys
import time

import pytest

from tests import procs
from tests.test_gcs import gcs  # noqa: F401  (the fake-gcs-server fixture)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _pod(tmp_path, data_dir, fault=""):
  """Runs both hosts to the end; [(returncode, output)] of process 0 and 1."""
  import portpicker
  port = portpicker.pick_unused_port()
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT,
             XLA_FLAGS=procs.xla_flags(1))
  hosts = [subprocess.Popen(
      [sys.executable, "-m", "tests.data.pod_host", f"127.0.0.1:{port}", str(i), data_dir,
       str(tmp_path / f"host{i}"), fault], cwd=ROOT, env=env, stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True) for i in range(2)]
  try:
    return [(h.wait(timeout=240), h.stdout.read()) for h in hosts]
  finally:  # a hang fails the test (with what the hosts printed), never the suite
    for h in hosts:
      if h.poll() is None:
        h.kill()
        pytest.fail(f"a host hung:\n{h.communicate()[0][-3000:]}")


def _report(output):
  return json.loads([l for l in output.splitlines() if l.startswith("{")][-1])


@pytest.mark.multiprocess
def test_two_hosts_read_one_vocabulary_and_disjoint_shards(gcs, tmp_path):  # noqa: F811
  results = _pod(tmp_path, "gs://bucket/pod")
  for code, out in results:
    assert code == 0, out[-3000:]
  first, second = (_report(out) for _, out in results)
  assert first["vocab"] == second["vocab"]  # byte-identical vocab.txt
  assert first["files"] == second["files"]  # the same instance files, byte for byte
  assert any("array_record" in f for f in first["files"])
  assert first["instances_dir"].startswith(str(tmp_path / "host0"))
  assert second["instances_dir"].startswith(str(tmp_path / "host1"))
  # Only process 0 built: process 1 copied instances and vocab, never the documents.
  assert any(d.startswith("documents-") for d in os.listdir(tmp_path / "host0/gs/bucket/pod"))
  assert not any(d.startswith("documents-")
                 for d in os.listdir(tmp_path / "host1/gs/bucket/pod"))
  assert "vocab: documents" not in results[1][1]
  # Epoch 0 split between the hosts: disjoint, together every instance once.
  a, b = set(first["indices"]), set(second["indices"])
  assert not a & b and a | b == set(range(first["n"])) and first["n"] == second["n"] > 8
  assert first["batch_rows"] == second["batch_rows"] == 4


@pytest.mark.multiprocess
def test_two_hosts_without_a_shared_disk_use_process_0s_bpe(tmp_path):
  """GPT's lm data, each host's data_dir on its own disk: process 0 trains the BPE and
  sends it; process 1 (whose train_bpe raises) writes it and builds the same streams."""
  results = _pod(tmp_path, "unused", "lm")
  for code, out in results:
    assert code == 0, out[-3000:]
  first, second = (_report(out) for _, out in results)
  assert first["tokenizer"] == second["tokenizer"] and first["tokens"] == second["tokens"]
  assert first["streams_dir"].startswith(str(tmp_path / "host0"))
  assert second["streams_dir"].startswith(str(tmp_path / "host1"))


@pytest.mark.multiprocess
@pytest.mark.parametrize("fault, message", [
    ("fail", r"process 1: process 0 failed to prepare the data, so this process stops too: "
             r"ValueError: the corpus is broken on process 0"),
    # Ours, or jax's own when its error poller aborts the process first (a race).
    ("die", r"RuntimeError: process 1: lost process 0 while it prepared the data \(it died or "
            r"was preempted: see its log\); rerun every process|Terminating process because "
            r"the JAX distributed service detected fatal errors. This most likely indicates "
            r"that another task died"),
    ("slow", r"TimeoutError: process 1: process 0 has not finished preparing the data after "
             r"3 s \(config.data.prepare_timeout\)")])
def test_process_0_failing_dying_or_silent_stops_the_others_with_the_reason(
    gcs, tmp_path, fault, message):  # noqa: F811
  import re
  start = time.monotonic()
  (code0, out0), (code1, out1) = _pod(tmp_path, f"gs://bucket/{fault}", fault)
  assert code1 != 0 and re.search(message, out1), out1[-3000:]
  assert time.monotonic() - start < 120  # at once (die, fail) or at 3 s: not the 2 h default
  assert not (tmp_path / "host1").exists()  # built nothing, copied nothing
  if fault == "fail":
    assert code0 != 0 and "the corpus is broken on process 0" in out0
