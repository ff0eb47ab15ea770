# XLA / JAX settings for NVIDIA GPUs, sourced by launch/gpu.sh and launch/slurm.sbatch.
# Each flag exists in jax 0.10.2's XLA (tests/launch/test_gpu_env.py has XLA parse them:
# an unknown flag aborts XLA at start-up). They follow the JAX GPU performance tips and
# NVIDIA JAX-Toolbox's / MaxText's GPU recipes. A flag already in XLA_FLAGS wins (XLA
# reads the flags in order; the caller's come last).
_gpu_flags=(
  # Schedule async collectives against compute: fsdp's all-gathers / reduce-scatters and
  # the data-parallel all-reduce overlap the layers' matmuls instead of waiting in line.
  --xla_gpu_enable_latency_hiding_scheduler=true
  # Collectives on a high-priority stream, so compute kernels do not starve them.
  --xla_gpu_enable_highest_priority_async_stream=true
  # In the scanned layers: start layer i+1's all-gather (and finish layer i-1's
  # reduce-scatter / all-reduce) while layer i computes ...
  --xla_gpu_enable_pipelined_all_gather=true
  --xla_gpu_enable_pipelined_reduce_scatter=true
  --xla_gpu_enable_pipelined_all_reduce=true
  # ... with the layer loop double-buffered (unrolled by 2) so there is room to do it.
  --xla_gpu_enable_while_loop_double_buffering=true
  # Fewer, larger collectives: NCCL pays a latency per call (gradients of 100+ small
  # params). 128 MiB all-reduce / all-gather, 64 MiB reduce-scatter (JAX-Toolbox).
  --xla_gpu_all_reduce_combine_threshold_bytes=134217728
  --xla_gpu_all_gather_combine_threshold_bytes=134217728
  --xla_gpu_reduce_scatter_combine_threshold_bytes=67108864
  # Combine gathers / scatters of different dimensions too (more of them combine).
  --xla_gpu_enable_all_gather_combine_by_dim=false
  --xla_gpu_enable_reduce_scatter_combine_by_dim=false
)
export XLA_FLAGS="${_gpu_flags[*]}${XLA_FLAGS:+ $XLA_FLAGS}"
unset _gpu_flags
# JAX preallocates 75% of GPU memory by default; the training step is the only user of
# the GPU, so give it 90% (the rest: cuDNN / cuBLAS workspaces, NCCL buffers).
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.90}"
