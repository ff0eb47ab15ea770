"""libtpu's host settings on a machine without a TPU: no libtpu error lines at its start.

libtpu (installed for bert_jax.aot's TPU compiler) reads this host's place in a TPU slice
from the environment and, for a variable that is not there, from the GCE metadata
server. Where neither has it (jax sets TPU_SKIP_MDS_QUERY=1 when it finds no TPU chip,
so libtpu asks no server), libtpu takes the text of its own warning as the value, and
every start printed (libtpu 0.0.52; an AOT compile, or jax's TPU attempt on a GPU box):

  Failed to find host bounds for accelerator type: WARNING: could not determine TPU
      accelerator type, please set env var `TPU_ACCELERATOR_TYPE` manually, ...
  WARNING: Logging before InitGoogle() is written to STDERR
  E0000 ... common_lib.cc:906] INVALID_ARGUMENT: Error: unexpected worker hostname
      'WARNING: could not determine TPU worker hostnames or IP addresses' from env var
      TPU_WORKER_HOSTNAMES. ...
  === Source Location Trace: ===
  learning/45eac/tfrc/runtime/libtpu_init_utils.cc:370

single_host_defaults() says instead what such a machine is: one host, worker 0, alone.
It sets only variables that are unset, and only where platforms.tpu_signs finds no TPU
(no chips, no TPU variable, no JAX_PLATFORMS naming tpu): a TPU VM, a GKE pod or a user's
own setting keeps what it has. hardware.configure() calls it (every entry point, before
jax can start libtpu), and chips.topology_devices does too, for code that compiles for a
topology without an entry point. The compile-only topologies are the same with and
without these (devices, coordinates, process indices: checked for v4, v5e, v5p, v6e).
"""
from __future__ import annotations

import importlib.util
import os

from bert_jax.hardware import platforms

# TPU_PROCESS_ADDRESSES, not TPU_WORKER_HOSTNAMES (libtpu takes either): bert_jax.main
# reads TPU_WORKER_HOSTNAMES as a GKE pod and would start jax's distributed runtime.
# TPU_WORKER_ID too, or libtpu writes its warning text into this process's environment,
# where child processes find it. libtpu binds no port for a compile-only topology.
SINGLE_HOST = {
    "TPU_SKIP_MDS_QUERY": "1",                      # no metadata lookup (jax sets it too)
    "TPU_HOST_BOUNDS": "1,1,1",                     # one host: no accelerator type asked
    "TPU_PROCESS_ADDRESSES": "localhost:8476",      # libtpu's default port
    "TPU_WORKER_ID": "0",
}


def single_host_defaults(root: str = "/", environ=None) -> dict[str, str]:
  """Sets SINGLE_HOST's variables that `environ` (default os.environ) lacks, when libtpu
  is installed and nothing suggests a TPU; names them in platforms.DEFAULTED, so that no
  accelerator check (here or in a child process) takes them for a TPU launcher's. Returns
  what it set ({} on a TPU host, or when all were set already)."""
  environ = os.environ if environ is None else environ
  libtpu = importlib.util.find_spec("libtpu") is not None or environ.get("TPU_LIBRARY_PATH")
  if not libtpu or platforms.tpu_signs(root, environ):
    return {}
  added = {k: v for k, v in SINGLE_HOST.items() if k not in environ}
  environ.update(added)
  if added:
    words = environ.get(platforms.DEFAULTED, "").split()
    environ[platforms.DEFAULTED] = " ".join(words + [f"{k}={v}" for k, v in added.items()])
  return added
