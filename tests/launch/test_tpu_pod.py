"""launch/tpu_pod.sh with a stand-in gcloud that runs the --command in a local "host"
(no TPU here): what a worker's shell receives and what --setup leaves in its REMOTE_DIR."""
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# describe: worker 0's address; scp: copies the local file to the host's home; ssh: runs
# --command there in bash.
FAKE_GCLOUD = """#!/bin/bash
if [[ $4 == describe ]]; then echo 10.1.2.3; exit; fi
if [[ $4 == scp ]]; then dest="${@: -1}"; cp "${@: -2:1}" "$HOME/${dest#*:}"; exit; fi
while [[ $1 != --command ]]; do shift; done
cd "$HOME" && exec bash -c "$2"
"""


def _exe(path, text):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(text)
  path.chmod(0o755)


def _env(tmp_path, remote):
  home = tmp_path / "home"
  home.mkdir(exist_ok=True)
  _exe(tmp_path / "bin" / "gcloud", FAKE_GCLOUD)
  return dict(os.environ, HOME=str(home), REMOTE_DIR=str(remote),
              PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")


def test_overrides_reach_every_worker_as_given(tmp_path):
  remote = tmp_path / "remote"
  _exe(remote / ".venv" / "bin" / "python", '#!/bin/sh\nprintf "%s\\n" "$@"\n')
  args = ["--config", "configs/bert_base.py", "--workdir", "gs://b/run",
          "--config.mesh_shape=(-1, 8, 4)", "--config.data.x=a|b;c", "--config.name=it's $HOME"]
  res = subprocess.run([os.path.join(ROOT, "launch", "tpu_pod.sh"), "pod", "zone", *args],
                       env=_env(tmp_path, remote), capture_output=True, text=True)
  assert res.returncode == 0, res.stderr
  assert res.stdout.splitlines() == ["-m", "bert_jax.main", *args]


def test_every_host_gets_worker_0_as_the_jax_coordinator(tmp_path):
  """Without it bert_jax.main did not initialize jax.distributed on a GCE TPU VM pod (its
  TPU_WORKER_HOSTNAMES is in the metadata, not the environment): no coordination service
  for process 0's data preparation or the heartbeat."""
  remote = tmp_path / "remote"
  _exe(remote / ".venv" / "bin" / "python", '#!/bin/sh\necho "$JAX_COORDINATOR_ADDRESS"\n')
  res = subprocess.run([os.path.join(ROOT, "launch", "tpu_pod.sh"), "pod", "zone", "--config",
                        "c.py"], env=_env(tmp_path, remote), capture_output=True, text=True)
  assert res.returncode == 0 and res.stdout == "10.1.2.3:8482\n" and res.stderr == "", res.stderr
  res = subprocess.run([os.path.join(ROOT, "launch", "tpu_pod.sh"), "pod", "zone", "--config",
                        "c.py", "--workdir", "runs/x"], env=_env(tmp_path, remote),
                       capture_output=True, text=True)
  assert res.returncode == 0 and res.stderr == (
      "note: --workdir runs/x is on each TPU VM's own disk; the hosts of a pod must share it "
      "(gs://BUCKET/...), only a one-host slice may use it\n")
  # 8482: jax's own port for a TPU cluster's coordinator.
  from jax._src.clusters import cloud_tpu_cluster
  assert cloud_tpu_cluster.coordinator_port == "8482"


def test_forward_env_sets_the_named_variables_on_the_hosts(tmp_path):
  remote = tmp_path / "remote"
  _exe(remote / ".venv" / "bin" / "python", '#!/bin/sh\nprintf "%s\\n" "$LIBTPU_INIT_ARGS"\n')
  script = os.path.join(ROOT, "launch", "tpu_pod.sh")
  flags = "--xla_tpu_enable_async_all_gather=true --xla_dump_to='/tmp/x y'"
  env = dict(_env(tmp_path, remote), FORWARD_ENV="LIBTPU_INIT_ARGS", LIBTPU_INIT_ARGS=flags)
  res = subprocess.run([script, "pod", "zone", "--config", "c.py"], env=env,
                       capture_output=True, text=True)
  assert res.returncode == 0 and res.stdout == flags + "\n", res.stderr
  env["FORWARD_ENV"] = "LIBTPU_INIT_ARGS NOT_SET_HERE"
  res = subprocess.run([script, "pod", "zone", "--config", "c.py"], env=env,
                       capture_output=True, text=True)
  assert res.returncode == 2 and res.stdout == "" and res.stderr == (
      "error: FORWARD_ENV names 'NOT_SET_HERE', which is not a variable set here\n")


def test_forwarded_values_stay_off_command_lines_and_out_of_dry_run(tmp_path):
  """A token forwarded to the hosts travels in a file the remote shell reads and deletes:
  not in the ssh command (ps shows it on both machines), not in DRY_RUN's output."""
  remote = tmp_path / "remote"
  _exe(remote / ".venv" / "bin" / "python", '#!/bin/sh\nprintf "%s\\n" "$WANDB_API_KEY"\n')
  secret = "s3cr3t-t0ken"
  env = dict(_env(tmp_path, remote), FORWARD_ENV="WANDB_API_KEY", WANDB_API_KEY=secret)
  log = tmp_path / "commands.log"  # every gcloud command line, as ps would show it
  _exe(tmp_path / "bin" / "gcloud", f'#!/bin/bash\nprintf "%s\\n" "$*" >> {log}\n' +
       FAKE_GCLOUD.split("\n", 1)[1])
  script = os.path.join(ROOT, "launch", "tpu_pod.sh")
  res = subprocess.run([script, "pod", "zone", "--config", "c.py"], env=env,
                       capture_output=True, text=True)
  assert res.returncode == 0 and res.stdout == secret + "\n", res.stderr
  assert secret not in log.read_text()
  assert not list((tmp_path / "home").glob(".bert_jax_env*"))  # read, then deleted
  res = subprocess.run([script, "pod", "zone", "--config", "c.py"], env=dict(env, DRY_RUN="1"),
                       capture_output=True, text=True)
  assert res.returncode == 0 and secret not in res.stdout + res.stderr
  assert "sets: JAX_COORDINATOR_ADDRESS WANDB_API_KEY" in res.stdout


def test_a_host_without_setup_is_one_line_and_bad_usage_exits_2(tmp_path):
  remote = tmp_path / "remote"
  remote.mkdir()
  script = os.path.join(ROOT, "launch", "tpu_pod.sh")
  res = subprocess.run([script, "pod", "zone", "--config", "c.py"],
                       env=_env(tmp_path, remote), capture_output=True, text=True)
  assert res.returncode == 2
  assert res.stderr == (f"error: {remote}/.venv/bin/python not found: run "
                        "launch/tpu_pod.sh pod zone --setup first\n")
  res = subprocess.run([script, "--config", "c.py"], capture_output=True, text=True)
  assert res.returncode == 2 and res.stderr.startswith("error: usage: launch/tpu_pod.sh TPU_NAME")


def test_setup_copies_the_checkout_over_the_old_copy_without_local_venv(tmp_path):
  """scp --recurse copied .venv and .git too and, with REMOTE_DIR there, nested a second
  copy inside it (the hosts kept running the old code)."""
  src = tmp_path / "checkout"
  shutil.copy(os.path.join(ROOT, "launch", "tpu_pod.sh"), _mk(src / "launch") / "tpu_pod.sh")
  (src / ".gitignore").write_text(".venv/\n")
  (src / "a.py").write_text("v = 1\n")
  _exe(src / ".venv" / "bin" / "python", "local interpreter\n")
  subprocess.run(["git", "init", "-q", str(src)], check=True)
  subprocess.run(["git", "-C", str(src), "add", "a.py", ".gitignore", "launch"], check=True)
  remote = tmp_path / "remote"
  _exe(remote / ".venv" / "bin" / "python", "#!/bin/sh\n")
  _exe(remote / ".venv" / "bin" / "pip", '#!/bin/sh\necho pip "$@" >> pip.log\n')
  env = _env(tmp_path, remote)
  for version in ("1", "2"):
    (src / "a.py").write_text(f"v = {version}\n")
    (src / "new.py").write_text("untracked, not ignored\n")
    res = subprocess.run([str(src / "launch" / "tpu_pod.sh"), "pod", "zone", "--setup"],
                         env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
  # Tracked files only: an untracked file (new.py; a stray key file) stays here.
  assert sorted(p.name for p in remote.iterdir()) == [
      ".gitignore", ".venv", "a.py", "launch", "pip.log"]
  assert (remote / "a.py").read_text() == "v = 2\n"
  assert (remote / ".venv" / "bin" / "python").read_text() == "#!/bin/sh\n"
  assert (remote / "pip.log").read_text().splitlines() == [
      "pip install -q -r requirements-tf.txt -e .[tpu,gcs,wandb]"] * 2
  assert not (tmp_path / "home" / "bert_jax_src.tgz").exists()


def _mk(path):
  path.mkdir(parents=True, exist_ok=True)
  return path


def _asked(args, cwd) -> dict:
  """{package: [Requirement, ...]} of a `pip install` command line as pip reads it: -r files
  (and the -r lines inside them), `-e .[extras]` as pyproject's dependencies + those extras."""
  asked = {}

  def add(line):
    req = Requirement(line)
    asked.setdefault(canonicalize_name(req.name), []).append(req)

  def read(name):
    for line in (cwd / name).read_text().splitlines():
      line = line.split("#", 1)[0].strip()
      if line.startswith("-r "):
        read(line[3:].strip())
      elif line:
        add(line)

  args = list(args)
  while args:
    arg = args.pop(0)
    if arg == "-r":
      read(args.pop(0))
    elif arg == "-e":
      extras = Requirement("bert_jax" + args.pop(0)[1:]).extras  # ".[a,b]"
      with open(cwd / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
      for line in project["dependencies"]:
        add(line)
      for extra in extras:
        for line in project["optional-dependencies"][extra]:
          add(line)
    elif not arg.startswith("-"):
      add(arg)
  return asked


def test_setup_installs_what_the_documented_pod_commands_need(tmp_path):
  """The pod command this script documents (--workdir gs://...) needs gcsfs, which was only
  in the gcs extra: every host stopped at start-up with "needs the gcsfs package". And
  jax[tpu]==0.10.2 pinned libtpu 0.0.42.*, another compiler than the 0.0.52 that compiled
  every AOT table in bench/RESULTS.md: now one libtpu pin, pyproject's tpu extra."""
  src = tmp_path / "checkout"
  shutil.copy(os.path.join(ROOT, "launch", "tpu_pod.sh"), _mk(src / "launch") / "tpu_pod.sh")
  for name in ("pyproject.toml", "requirements.txt", "requirements-tf.txt"):
    shutil.copy(os.path.join(ROOT, name), src / name)
  remote = tmp_path / "remote"
  _exe(remote / ".venv" / "bin" / "python", "#!/bin/sh\n")
  _exe(remote / ".venv" / "bin" / "pip", '#!/bin/sh\nprintf "%s\\n" "$@" > pip.args\n')
  res = subprocess.run([str(src / "launch" / "tpu_pod.sh"), "pod", "zone", "--setup"],
                       env=_env(tmp_path, remote), capture_output=True, text=True)
  assert res.returncode == 0, res.stderr
  args = (remote / "pip.args").read_text().splitlines()
  assert args[:2] == ["install", "-q"]
  asked = _asked(args[2:], remote)  # the files as shipped to the host
  test_pins = {n: r[0].specifier for n, r in _asked(["-r", "requirements-test.txt"],
                                                     Path(ROOT)).items()}
  # gs:// workdirs, W&B, tfds catalog corpora (configs/bert_base.py's wikipedia), TPU.
  for name in ("gcsfs", "wandb", "tensorflow-cpu", "libtpu", "jax", "jaxlib"):
    assert name in asked, name
  for name in ("gcsfs", "wandb", "libtpu"):  # the tests' versions are admitted
    (version,) = [s.version for s in test_pins[name]]
    assert all(r.specifier.contains(version) for r in asked[name]), (name, asked[name])
  # One libtpu: exactly the tests' (and the AOT tables') pin, and no jax[tpu] naming its own.
  assert {str(r.specifier) for r in asked["libtpu"]} == {str(test_pins["libtpu"])}
  assert "==0.0.52" == str(test_pins["libtpu"])
  assert all(not r.extras for r in asked["jax"]) and "==0.10.2" in {
      str(r.specifier) for r in asked["jax"]}


def test_setup_with_a_python_older_than_311_on_the_hosts_is_one_line(tmp_path):
  """pip install -e . refused it only after installing the requirements (or failed on them)."""
  src = tmp_path / "checkout"
  shutil.copy(os.path.join(ROOT, "launch", "tpu_pod.sh"), _mk(src / "launch") / "tpu_pod.sh")
  (src / "a.py").write_text("v = 1\n")
  _exe(tmp_path / "bin" / "python3.10", '#!/bin/sh\n[ "$1" = -V ] && echo "Python 3.10.12"; exit 1\n')
  remote = tmp_path / "remote"
  env = dict(_env(tmp_path, remote), REMOTE_PYTHON="python3.10")
  res = subprocess.run([str(src / "launch" / "tpu_pod.sh"), "pod", "zone", "--setup"],
                       env=env, capture_output=True, text=True)
  assert res.returncode == 2 and res.stdout == ""
  host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
  assert res.stderr == (f"error: python3.10 on {host} is Python 3.10.12, bert_jax needs >= "
                        "3.11: install one there and rerun with REMOTE_PYTHON=python3.11 "
                        "launch/tpu_pod.sh pod zone --setup\n")
  assert not (remote / ".venv").exists() and (remote / "a.py").exists()
