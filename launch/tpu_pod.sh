#!/usr/bin/env bash
# Runs the same main command on every host of a TPU VM pod slice.
#   launch/tpu_pod.sh TPU_NAME ZONE --config configs/bert_base.py --workdir gs://BUCKET/run
# Each host starts one process; jax.distributed.initialize() discovers the pod from the TPU
# environment, and every process reads only its shard of the data (grain, by process index).
# The hosts of a pod must share the workdir (gs://); rerunning the same command resumes
# from its newest checkpoint. Overrides are quoted for the remote shell as given
# ("--config.mesh_shape=(-1,8,4)" arrives as one argument).
# First time, and after local edits: launch/tpu_pod.sh TPU_NAME ZONE --setup copies this
# checkout's tracked files (git ls-files: not untracked or ignored ones, such as .venv,
# workdirs or a stray credentials file; commit or `git add` a new file to ship it)
# into $REMOTE_DIR (default ~/bert_jax) on every host, over the old copy, and installs
# .venv there (with $REMOTE_PYTHON, default python3: it must be Python >= 3.11). DRY_RUN=1 prints the gcloud commands instead of running them.
# The hosts do not get this shell's environment: FORWARD_ENV="LIBTPU_INIT_ARGS XLA_FLAGS"
# sets those variables, with their values here, for the run on every host. The values
# travel in a file (mode 600, copied with scp, read and deleted by the remote shell), never
# on a command line (visible in `ps` on both ends) nor in DRY_RUN's output (names only).
set -euo pipefail
usage="usage: launch/tpu_pod.sh TPU_NAME ZONE --setup | --config FILE --workdir gs://BUCKET/RUN [--config.x=y ...]"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then echo "$usage"; exit 0; fi
if [[ $# -lt 3 || "$1" == -* || "$2" == -* ]]; then echo "error: $usage" >&2; exit 2; fi
TPU_NAME=$1; ZONE=$2; shift 2
REMOTE_DIR=${REMOTE_DIR:-\~/bert_jax}
run() { if [[ -n "${DRY_RUN:-}" ]]; then printf '%q ' "$@"; echo; else "$@"; fi; }
if [[ "$1" == "--setup" ]]; then
  SRC=$(cd "$(dirname "$0")/.." && pwd)
  TARBALL=$(mktemp "${TMPDIR:-/tmp}/bert_jax_src.XXXXXX")
  trap 'rm -f "$TARBALL"' EXIT
  if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
    # Tracked files only; files deleted from the work tree but still in the index are left out.
    (cd "$SRC" && git ls-files -z --cached | while IFS= read -r -d '' f; do
       [[ -e "$f" ]] && printf '%s\0' "$f"; done | tar -czf "$TARBALL" --null -T -)
  else
    tar -czf "$TARBALL" -C "$SRC" --exclude=.venv --exclude='.venv-*' --exclude=.git .
  fi
  # What the documented pod commands need, all pinned where the tests pin them:
  # requirements-tf.txt (requirements.txt's exact pins, jax==0.10.2 among them, and
  # tensorflow-cpu for the tfds catalog corpora, e.g. configs/bert_base.py's wikipedia) and
  # pyproject's extras: tpu (libtpu: the one pin, the compiler every AOT table in
  # bench/RESULTS.md comes from; not jax[tpu], whose libtpu 0.0.42.* would be another),
  # gcs (gcsfs, for --workdir gs://...) and wandb (--config.wandb.project).
  POD_EXTRAS="tpu,gcs,wandb"
  # TPU VM images may ship an older python3 than pyproject's requires-python (3.11).
  PY=${REMOTE_PYTHON:-python3}; NEW_ENOUGH='import sys; sys.exit(sys.version_info < (3, 11))'
  run gcloud compute tpus tpu-vm scp --zone="$ZONE" --worker=all "$TARBALL" \
    "$TPU_NAME:bert_jax_src.tgz"
  run gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command \
    "mkdir -p $REMOTE_DIR && tar -xzf ~/bert_jax_src.tgz -C $REMOTE_DIR && rm ~/bert_jax_src.tgz \
     && cd $REMOTE_DIR && { test -x .venv/bin/python || { $PY -c '$NEW_ENOUGH' || { echo \
     \"error: $PY on \$(hostname) is Python \$($PY -V 2>&1 | cut -d' ' -f2), bert_jax needs >= 3.11: \
install one there and rerun with REMOTE_PYTHON=python3.11 launch/tpu_pod.sh $TPU_NAME $ZONE --setup\" >&2; \
     exit 2; } && $PY -m venv .venv; }; } \
     && .venv/bin/pip install -q -r requirements-tf.txt -e '.[$POD_EXTRAS]'"
  exit 0
fi
ARGS=$(printf ' %q' "$@")
WORKDIR=""; prev=""
for a in "$@"; do
  if [[ "$prev" == "--workdir" ]]; then WORKDIR=$a; elif [[ "$a" == --workdir=* ]]; then WORKDIR=${a#--workdir=}; fi
  prev=$a
done
if [[ -n "$WORKDIR" && "$WORKDIR" != gs://* ]]; then
  echo "note: --workdir $WORKDIR is on each TPU VM's own disk; the hosts of a pod must share it (gs://BUCKET/...), only a one-host slice may use it" >&2
fi
# jax.distributed's coordinator: worker 0 (process 0), at jax's TPU port. bert_jax.main
# initializes jax.distributed on a TPU VM (platforms.tpu_chips) or when
# JAX_COORDINATOR_ADDRESS is set; jax's own detection would take worker 0 from the VM's
# metadata too, and this names it explicitly. The process ids and count come from the
# metadata. A TPU name that does not exist ends here with gcloud's NOT_FOUND line.
if [[ -n "${DRY_RUN:-}" ]]; then
  run gcloud compute tpus tpu-vm describe "$TPU_NAME" --zone="$ZONE" \
    "--format=value(networkEndpoints[0].ipAddress)"
  WORKER0=WORKER0_IP
else
  WORKER0=$(gcloud compute tpus tpu-vm describe "$TPU_NAME" --zone="$ZONE" \
    "--format=value(networkEndpoints[0].ipAddress)")
fi
if [[ -z "$WORKER0" ]]; then
  echo "error: gcloud names no network endpoint for TPU $TPU_NAME in $ZONE" >&2; exit 2
fi
for name in ${FORWARD_ENV:-}; do
  if [[ ! "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ || -z "${!name+set}" ]]; then
    echo "error: FORWARD_ENV names '$name', which is not a variable set here" >&2; exit 2
  fi
done
ENVFILE=$(mktemp "${TMPDIR:-/tmp}/bert_jax_env.XXXXXX")  # mode 600
trap 'rm -f "$ENVFILE"' EXIT
printf 'export JAX_COORDINATOR_ADDRESS=%q\n' "$WORKER0:8482" > "$ENVFILE"  # FORWARD_ENV may override
for name in ${FORWARD_ENV:-}; do printf 'export %s=%q\n' "$name" "${!name}" >> "$ENVFILE"; done
if [[ -n "${DRY_RUN:-}" ]]; then echo "# $ENVFILE sets: JAX_COORDINATOR_ADDRESS ${FORWARD_ENV:-}"; fi
REMOTE_ENV=".bert_jax_env.$$"
run gcloud compute tpus tpu-vm scp --zone="$ZONE" --worker=all "$ENVFILE" "$TPU_NAME:$REMOTE_ENV"
run gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command \
  "exec 3<~/$REMOTE_ENV; rm -f ~/$REMOTE_ENV; . /dev/fd/3 && exec 3<&- && cd $REMOTE_DIR \
   && if test -x .venv/bin/python; then .venv/bin/python -m bert_jax.main$ARGS; \
   else echo \"error: \$PWD/.venv/bin/python not found: run launch/tpu_pod.sh $TPU_NAME $ZONE --setup first\" >&2; exit 2; fi"
