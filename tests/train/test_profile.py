"""train/profile.py's guard: no trace (and no crash) where libtpu's profiler plugin is loaded."""
import os

from bert_jax.train import profile


def test_a_process_with_libtpu_loaded_skips_the_trace_with_a_line(tmp_path, monkeypatch):
  monkeypatch.setattr(profile, "libtpu_loaded", lambda: True)
  said = []
  p = profile.StepProfiler(str(tmp_path), num_steps=2, first_step=0, start_step=0,
                           log=said.append)
  assert p.run(2, lambda x: x + 1, 1) == 2 and not p.tracing
  assert not os.path.exists(tmp_path / "plugins")
  assert len(said) == 1 and "libtpu is loaded in this process but the backend is cpu" in said[0]


def test_libtpu_loaded_reads_this_process_maps():
  with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
    assert profile.libtpu_loaded() == any("libtpu" in line for line in f)
