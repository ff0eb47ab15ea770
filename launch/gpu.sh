#!/usr/bin/env bash
# One machine with NVIDIA GPUs (one process sees them all): the XLA settings of
# launch/gpu_env.sh, then bert_jax.main. Run from the checkout holding .venv:
#   bash launch/gpu.sh --config configs/bert_base.py --workdir /path/to/run
# A config's mesh that cannot exist on the GPUs present (bert_large's fsdp=4 on one GPU)
# shrinks with a printed line; --config.mesh_shape chooses. Clusters: launch/slurm.sbatch.
# Install: pip install -r requirements.txt "jax[cuda12]==0.10.2" (or jax 0.11 with
# "jax[cuda13]") into .venv. Check a GPU first: python bench/device_check.py (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
  echo "error: $PWD/.venv/bin/python not found: run from the bert_jax checkout holding .venv (see docs/gpu.md)" >&2
  exit 2
fi
source launch/gpu_env.sh
exec .venv/bin/python -m bert_jax.main "$@"
