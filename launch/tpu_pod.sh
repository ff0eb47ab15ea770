#!/usr/bin/env bash
# Runs the same main command on every host of a TPU VM pod slice.
#   launch/tpu_pod.sh TPU_NAME ZONE --config configs/bert_base.py --workdir gs://BUCKET/run
# Each host starts one process; jax.distributed.initialize() discovers the pod from the TPU
# environment, and every process reads only its shard of the data (grain, by process index).
# First time: launch/tpu_pod.sh TPU_NAME ZONE --setup  (clones nothing: rsyncs this checkout).
set -euo pipefail
TPU_NAME=${1:?TPU name}; ZONE=${2:?zone}; shift 2
REMOTE_DIR=${REMOTE_DIR:-\~/bert_jax}
if [[ "${1:-}" == "--setup" ]]; then
  gcloud compute tpus tpu-vm scp --recurse --zone="$ZONE" --worker=all \
    "$(cd "$(dirname "$0")/.." && pwd)" "$TPU_NAME:$REMOTE_DIR"
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command \
    "cd $REMOTE_DIR && python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt \
     'jax[tpu]==0.10.2' && .venv/bin/pip install -q --no-deps -e ."
  exit 0
fi
ARGS=$(printf ' %q' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker=all --command \
  "cd $REMOTE_DIR && .venv/bin/python -m bert_jax.main$ARGS"
