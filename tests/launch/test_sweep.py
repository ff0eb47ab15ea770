import importlib
import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


LAUNCH = os.path.join(ROOT, "launch")


def _launch_module(name: str = "sweep"):
  """launch/<name>.py as the script sees it: launch/ on sys.path, so sweep.py's modules
  beside it (sweep_points, sweep_aot) import by name."""
  if os.path.abspath(LAUNCH) not in map(os.path.abspath, sys.path):
    sys.path.insert(0, os.path.abspath(LAUNCH))
  return importlib.import_module(name)


def test_dry_run_prints_one_command_per_point_with_distinct_workdirs():
  out = subprocess.run(
      [sys.executable, "launch/sweep.py", "--config", "configs/bert_base.py",
       "--workdir_root", "/tmp/sw", "--dry_run", "--config.train.num_steps=10"],
      cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip().splitlines()
  assert len(out) == 6  # 3 learning rates x 2 warmups
  workdirs = {a for line in out for a in line.split() if a.startswith("--workdir=")}
  assert len(workdirs) == 6
  assert all("--config.train.num_steps=10" in line for line in out)
  assert any("--config.train.learning_rate=0.0002" in l and "--config.train.warmup_steps=5000" in l
             for l in out)


def test_product_zip_and_launchers():
  sw = _launch_module()
  h = _launch_module("sweep_points").hyper
  pts = h.product([h.sweep("config.a", [1, 2]), h.sweep("config.b", ["x"])])
  assert pts == [{"config.a": 1, "config.b": "x"}, {"config.a": 2, "config.b": "x"}]
  assert h.zipit([h.sweep("config.a", [1, 2]), h.sweep("config.b", [3, 4])])[1] == {
      "config.a": 2, "config.b": 4}

  class Args:
    launcher, tpu_name, zone, remote_dir = "tpu", "pod", "zone-a", "~/bj"
  cmd = sw.wrap(["python", "-m", "bert_jax.main", "--workdir=w"], Args)
  assert cmd == ["env", "REMOTE_DIR=~/bj", os.path.join(os.path.abspath(ROOT), "launch",
                                                        "tpu_pod.sh"), "pod", "zone-a", "--workdir=w"]


def test_missing_config_is_a_clear_error():
  res = subprocess.run([sys.executable, "launch/sweep.py", "--config", "configs/nope.py",
                        "--workdir_root", "/tmp/sw", "--dry_run"], cwd=ROOT,
                       capture_output=True, text=True)
  assert res.returncode == 2 and "configs/nope.py does not exist" in res.stderr


def test_an_unknown_config_arg_fails_before_any_run():
  """`configs/bert_base.py:nope` printed (and would start) 6 runs that each failed."""
  pts = _launch_module("sweep_points")
  with pytest.raises(ValueError, match="unknown arg 'nope'"):
    pts.load_sweep(os.path.join(ROOT, "configs", "bert_base.py:nope"))
  assert len(pts.load_sweep(os.path.join(ROOT, "configs", "bert_base.py:mlm_only"))) == 6


def test_aot_table_lists_points_and_the_largest_fitting_batch_per_strategy():
  aot = _launch_module("sweep_aot")
  gib = 2 ** 30
  def row(mesh, batch, fits, total=None):
    r = {"overrides": {"config.mesh_shape": mesh, "config.train.batch_size": batch},
         "fits": fits, "compile_seconds": 12.0}
    if total is not None:
      r.update(hbm={"total": total * gib, "temporaries": (total - 1) * gib},
               roofline={"step_seconds": 0.05},
               cost={"optimal_seconds": total / 100, "est_mfu": 0.4,
                     "tokens_per_s_per_chip": batch * 1000 / total ** 0.5},
               collectives={"all-reduce": {"count": 226, "bytes": 867 * 2 ** 20},
                            "all-gather": {"count": 390, "bytes": 1217 * 2 ** 20},
                            "all-to-all": {"count": 0, "bytes": 0}})
    else:
      r["error"] = ("train step does not fit: needs >= 19.67 GiB per chip of 16.0 GiB; "
                    "dominant term: temporaries 19.67 GiB (activations: ...)")
    return r
  rows = [row((-1, 1, 1), 256, True, 9.5), row((-1, 1, 1), 1024, False, 17.0),
          row((1, -1, 1), 256, True, 3.0), row((1, -1, 1), 1024, True, 12.0),
          row((1, -1, 1), 4096, False)]
  table = aot.aot_table(rows, "v5e-256")
  assert ("| -1x1x1 | 1024 | no | 17.00 GiB | 16.00 | 226/867 / 390/1217 / 0 / 0 / 0 | 50.0 "
          "| 170.0 | 12 |") in table
  assert ("| 1x-1x1 | 4096 | no | needs >= 19.67 GiB per chip of 16.0 GiB; dominant term: "
          "temporaries 19.67 GiB | >= 19.67 |  |  |  | 12 |") in table
  # Of the points that fit, 1x-1x1 at 1024 rows has the highest tokens/s per chip
  # (1024 * 1000 / sqrt(12)), not the -1x1x1 one that does not fit (1024 * 1000 / sqrt(17)).
  assert table.endswith("Fastest point that fits, by the TPU compiler's estimate: "
                        "mesh_shape 1x-1x1, batch_size 1024 (295,603 tokens/s per chip, "
                        "120.0 ms per step, est. MFU 40%)")
  assert "| -1x1x1 | 256 |" in table.split("largest global batch")[1]
  assert "| 1x-1x1 | 1024 |" in table.split("largest global batch")[1]


def test_sweep_sets_nested_locked_config_keys():
  pts = _launch_module("sweep_points")
  spec = importlib.util.spec_from_file_location("bl", os.path.join(ROOT, "configs", "bert_large.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  config = mod.get_config("s512")
  config.lock()
  pts.set_key(config, "config.model.remat_policy", "full")
  pts.set_key(config, "config.mesh_shape", [1, -1, 1])
  assert config.model.remat_policy == "full" and config.mesh_shape == (1, -1, 1)
  assert [dict(p)["max_seq_length"] for p in config.train.phases] == [512]
  assert len(mod.get_sweep(pts.hyper)) == 36


def test_aot_sweep_skips_larger_batches_of_a_strategy_that_did_not_fit(monkeypatch, tmp_path):
  """bert_large.py's get_sweep through aot_rows with the compile replaced by a rule:
  fits below 1024 rows unless remat is 'none' (then below 256)."""
  aot = _launch_module("sweep_aot")
  from bert_jax.aot import check as check_lib, report as report_lib
  compiled = []

  def fake_check(config, topology, steps, config_name):
    batch, remat = config.train.batch_size, config.model.remat_policy
    compiled.append((tuple(config.mesh_shape), remat, batch))
    step = {"fits": True, "compile_seconds": 1.0, "hbm": {"total": batch * 2 ** 20},
            "roofline": {"step_seconds": 0.01}}
    report = {"steps": [step], "mesh": {}, "chip": {}, "fits": batch < (256 if remat == "none"
                                                                          else 1024)}
    if not report["fits"]:
      step["fits"], step["error"] = False, "train step does not fit: needs >= 2.00 GiB"
      err = report_lib.DoesNotFitError("x: train step does not fit")
      err.report = report
      raise err
    return report

  monkeypatch.setattr(check_lib, "check", fake_check)
  jsonl = tmp_path / "rows.jsonl"
  config = os.path.join(ROOT, "configs", "bert_large.py:s512")
  # A sweep stopped after its first strategy (remat none on the first mesh), with the
  # line it was writing cut short by the kill ...
  aot.aot_rows(config, "v5e-256", [], jsonl=str(jsonl),
              where=("config.mesh_shape=-1x1x1", "config.model.remat_policy=none"))
  assert len(compiled) == 1
  with open(jsonl, "a", encoding="utf-8") as f:
    f.write('{"overrides": {"config.mesh_shape": [-1, 1, 1], "config.model.remat')
  # ... resumes when rerun: that strategy's points come from the file, not compiled again.
  compiled.clear()
  rows = aot.aot_rows(config, "v5e-256", [], jsonl=str(jsonl))
  assert len(rows) == 36
  # Each row was written as it came: a sweep stopped midway keeps its points.
  # The cut line stays alone; the rerun's rows follow it whole, all but the one reused.
  lines = jsonl.read_text().splitlines()
  assert lines[3].endswith('"config.model.remat')
  assert [json.loads(line)["fits"] for line in lines[4:]] == [r["fits"] for r in rows[1:]]
  assert rows[0]["fits"] is False and not rows[0].get("skipped")
  # Per mesh: remat none compiles 256 (no), skips 1024, 4096; the others 256, 1024 (no);
  # the first mesh's remat none came from the file.
  assert len(compiled) == 4 * (1 + 2 + 2) - 1
  assert ((-1, 1, 1), "none", 256) not in compiled
  skipped = [r for r in rows if r.get("skipped")]
  assert len(skipped) == 36 - 20 and all(r["fits"] is False for r in skipped)
  assert skipped[0]["error"] == "not compiled: batch 256 already does not fit"
  table = aot.aot_table(rows, "v5e-256")
  best = table.split("largest global batch")[1]
  assert "| -1x8x1, none | none of the swept |" in best
  assert "| -1x8x1, full | 256 |" in best
  assert "| -1x8x4, full | 256 |" in best   # tensor-parallel: the vocabulary pads itself
  # Another topology or other flags compile again.
  compiled.clear()
  aot.aot_rows(config, "v5p-128", [], jsonl=str(jsonl),
              where=("config.mesh_shape=-1x1x1", "config.model.remat_policy=none"))
  aot.aot_rows(config, "v5e-256", ["--config.seed=1"], jsonl=str(jsonl),
              where=("config.mesh_shape=-1x1x1", "config.model.remat_policy=none"))
  assert len(compiled) == 2


def test_where_selects_points_by_their_table_cells():
  pts = _launch_module("sweep_points")
  points = pts.load_sweep(os.path.join(ROOT, "configs", "bert_large.py:s512"))
  got = pts.select(points, ["config.model.remat_policy=dots_no_batch|full",
                           "config.mesh_shape=-1x8x4"])
  assert len(got) == 6 and {p["config.train.batch_size"] for p in got} == {256, 1024, 4096}
  assert all(p["config.mesh_shape"] == (-1, 8, 4) for p in got)
  try:
    pts.select(points, ["config.model.nope=1"])
  except ValueError as e:
    assert "config.model.nope=1" in str(e) and "config.model.remat_policy" in str(e)
  else:
    raise AssertionError("an unknown key must be refused")


def _sweep(*args):
  return subprocess.run([sys.executable, "launch/sweep.py", *args], cwd=ROOT,
                        capture_output=True, text=True)


def test_slurm_and_tpu_runs_get_the_flags_not_the_local_interpreter():
  """--launcher slurm passed `-m bert_jax.main` again to slurm.sbatch (which runs
  `python -m bert_jax.main "$@"`); --launcher tpu ran this machine's python path on the VMs."""
  base = ["--config", "configs/bert_base.py", "--workdir_root", "/tmp/sw", "--dry_run"]
  slurm = _sweep(*base, "--launcher", "slurm").stdout.splitlines()[0].split()
  assert slurm[0] == "sbatch" and slurm[1].endswith("launch/slurm.sbatch")
  assert slurm[2:4] == ["--config=configs/bert_base.py",
                        "--workdir=/tmp/sw/000_learning_rate=5e-05,warmup_steps=5000"]
  assert "-m" not in slurm
  tpu = _sweep(*base, "--launcher", "tpu", "--tpu_name", "pod", "--zone", "z").stdout
  first = tpu.splitlines()[0].split()
  assert first[0].endswith("launch/tpu_pod.sh") and first[1:4] == [
      "pod", "z", "--config=configs/bert_base.py"]  # tpu_pod.sh adds the VMs' python
  assert sys.executable not in tpu


def test_a_misspelled_key_or_topology_fails_before_any_run():
  res = _sweep("--config", "configs/bert_base.py", "--workdir_root", "/tmp/sw", "--dry_run",
               "--config.train.learnin_rate=1")
  assert res.returncode == 2 and res.stdout == ""
  assert res.stderr.strip() == ("error: config.train.learnin_rate: config.train has no key "
                                "'learnin_rate'; did you mean 'learning_rate'?")
  # Before: one "topology 'v9-256': expected ..." per point, then a table and exit 0.
  res = _sweep("--config", "configs/bert_large.py:s512", "--aot", "v9-256")
  assert res.returncode == 2 and res.stdout == "" and len(res.stderr.splitlines()) == 1
  assert res.stderr.startswith("error: topology 'v9-256': expected GEN:AxB")
  # --aot's output files are refused without --aot, not silently ignored.
  res = _sweep("--config", "configs/bert_base.py", "--workdir_root", "/tmp/sw", "--dry_run",
               "--jsonl", "/tmp/sw/rows.jsonl")
  assert res.returncode == 2 and "--jsonl go with --aot" in res.stderr


def test_where_selects_runs_keeping_their_workdirs():
  """--where was read only with --aot: a dry run printed (and a run started) every point."""
  res = _sweep("--config", "configs/bert_base.py", "--workdir_root", "/tmp/sw", "--dry_run",
               "--where", "config.train.learning_rate=0.0001")
  workdirs = [a for line in res.stdout.splitlines() for a in line.split()
              if a.startswith("--workdir=")]
  assert workdirs == ["--workdir=/tmp/sw/002_learning_rate=0.0001,warmup_steps=5000",
                      "--workdir=/tmp/sw/003_learning_rate=0.0001,warmup_steps=10000"]


def test_the_docstrings_example_configs_define_a_sweep():
  """The help's local example used configs/bert_tiny.py, which has no get_sweep."""
  sw = _launch_module()
  pts = _launch_module("sweep_points")
  examples = [line.split("--config ")[1].split()[0] for line in sw.__doc__.splitlines()
              if "launch/sweep.py --config" in line]
  assert len(examples) == 3
  for config in examples:
    assert pts.load_sweep(os.path.join(ROOT, config)), config
  res = _sweep("--config", "configs/bert_tiny.py", "--workdir_root", "/tmp/sw", "--dry_run")
  assert res.returncode == 2 and res.stderr == (
      "error: configs/bert_tiny.py defines no get_sweep(hyper); configs that do: "
      "configs/bert_base.py, configs/bert_large.py, configs/gpt.py\n")


def test_a_where_value_no_point_has_is_an_error_and_tuples_may_be_written_as_such():
  """`--where config.mesh_shape=(-1,8,4)` (the override's spelling) selected nothing: an
  empty dry run or --aot table, exit 0."""
  pts = _launch_module("sweep_points")
  points = pts.load_sweep(os.path.join(ROOT, "configs", "bert_large.py:s512"))
  assert pts.select(points, ["config.mesh_shape=(-1, 8, 4)"]) == pts.select(
      points, ["config.mesh_shape=-1x8x4"])
  assert len(pts.select(points, ["config.mesh_shape=(-1,8,4)|-1x1x1"])) == 18
  res = _sweep("--config", "configs/bert_large.py:s512", "--workdir_root", "/tmp/sw",
               "--dry_run", "--where", "config.model.remat_policy=ful")
  assert res.returncode == 2 and res.stdout == ""
  assert res.stderr == ("error: --where 'config.model.remat_policy=ful': no point has "
                        "config.model.remat_policy = ful; its values: dots_no_batch, full, "
                        "none\n")


def test_a_launcher_missing_on_this_machine_is_one_line(tmp_path):
  env = dict(os.environ, PATH=str(tmp_path))  # no sbatch
  res = subprocess.run([sys.executable, "launch/sweep.py", "--config", "configs/bert_base.py",
                        "--workdir_root", str(tmp_path / "runs"), "--launcher", "slurm"],
                       cwd=ROOT, env=env, capture_output=True, text=True)
  assert res.returncode == 2
  assert res.stderr == "error: cannot start sbatch: No such file or directory\n"
  assert res.stdout.startswith("sbatch ") and not (tmp_path / "runs").exists()


CHILD = """
import pathlib, signal, sys, time
stop = []
signal.signal(signal.SIGINT, lambda *_: stop.append(1))
print("ready", flush=True)
while not stop:
  time.sleep(0.05)
time.sleep(1.0)                    # saving its checkpoint
pathlib.Path(sys.argv[1]).write_text("saved")
"""


def test_ctrl_c_lets_a_local_run_save_and_stops_the_sweep(tmp_path):
  """subprocess.call killed the run 0.25 s after Ctrl-C, before it could save."""
  saved = tmp_path / "saved"
  # A terminal's Python turns SIGINT into KeyboardInterrupt; a test run started in the
  # background inherits SIGINT ignored (POSIX shells do that to `&` jobs), so say it here.
  parent = (f"import signal, sys\n"
            f"signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            f"sys.path.insert(0, {os.path.abspath(LAUNCH)!r})\n"
            f"import sweep as m\n"
            f"print(m.run_to_end([sys.executable, '-c', {CHILD!r}, {str(saved)!r}]), flush=True)\n")
  proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True,
                          start_new_session=True)
  assert proc.stdout.readline() == "ready\n"
  os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
  assert proc.stdout.read() == "(0, True)\n" and proc.wait(10) == 0
  assert saved.read_text() == "saved"


def test_a_reader_that_leaves_early_is_no_traceback():
  """`sweep.py --dry_run | head -1` ended in a BrokenPipeError traceback."""
  read, write = os.pipe()
  os.close(read)  # the reader is gone before the first line
  res = subprocess.run([sys.executable, "launch/sweep.py", "--config", "configs/bert_base.py",
                        "--workdir_root", "/tmp/sw", "--dry_run"], cwd=ROOT, stdout=write,
                       stderr=subprocess.PIPE, text=True)
  os.close(write)
  assert res.returncode == 1 and res.stderr == ""
