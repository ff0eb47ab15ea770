"""Which chips are here, and the CPU tuning that entry points opt into.

  platforms.py   accelerator detection without starting a backend; JAX_PLATFORMS=cpu where
                 there is none (no libtpu start-up noise)
  chips.py       datasheet figures (MFU, AOT memory) and compile-only TPU topologies
  cpu_dense.py   the Dense layers' 2-D gradients (XLA:CPU)
  host_malloc.py the training CLI's glibc allocator policy (XLA:CPU's big buffers)

Importing this package, or any bert_jax module, changes nothing in the process. Entry
points (main, the apps, bert_jax.load, aot, visualize) call `configure()` once, before
jax starts a backend.
"""
from __future__ import annotations

import os


def configure(malloc: bool = False, environ=None) -> str:
  """Settles the platform and, on CPU only, turns the CPU tuning on. Returns "cpu" when
  the run will be on the CPU backend, else "accelerator".

  1. No TPU backend attempt where nothing suggests an accelerator (platforms.py), and
     gs:// through gcsfs (runtime/paths.prefer_gcsfs).
  2. On the CPU backend: the Dense layers' 2-D gradients (cpu_dense.install, taken by
     configs with model.dense_grad_2d, the CPU default) and, with `malloc` (the training
     CLI), the allocator policy, which restarts the process once (host_malloc.py).
  """
  from bert_jax.hardware import platforms  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import paths  # pylint: disable=g-import-not-at-top
  environ = os.environ if environ is None else environ
  paths.prefer_gcsfs(environ)  # not a platform setting, but every entry point's too
  platforms.cpu_without_accelerator(environ=environ)
  if not platforms.cpu_backend(environ=environ):
    return "accelerator"
  if malloc:
    from bert_jax.hardware import host_malloc  # pylint: disable=g-import-not-at-top
    host_malloc.reexec_with_huge_pages()  # before jax starts: its big buffers in huge pages
  from bert_jax.hardware import cpu_dense  # pylint: disable=g-import-not-at-top
  cpu_dense.install()
  return "cpu"
