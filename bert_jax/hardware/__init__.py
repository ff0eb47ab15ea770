"""Which chips are here, and the one CPU tuning left outside the model (word2vec's).

  platforms.py   accelerator detection without starting a backend; JAX_PLATFORMS=cpu where
                 there is none (no libtpu start-up noise)
  libtpu_env.py  libtpu's one-host settings where no TPU is (AOT compiles start it quietly)
  chips.py       datasheet figures (MFU, AOT memory) and compile-only TPU topologies
  cpu_threads.py word2vec's one-thread XLA:CPU backend (its trainer starts it, by config)

Importing this package, or any bert_jax module, changes nothing in the process. Entry
points (main, the apps, bert_jax.load, aot, visualize) call `configure()` once, before
jax starts a backend. The model code has no CPU tuning (bench/train_step/cpu_tuning.py
measured what the removed pieces bought).
"""
from __future__ import annotations

import os


def configure(environ=None) -> str:
  """Settles the platform before jax starts a backend: no TPU backend attempt where
  nothing suggests an accelerator (platforms.py), libtpu's one-host settings where no TPU
  is, for the libtpu starts that remain (libtpu_env.py: AOT compiles, jax's TPU attempt on
  a GPU machine), and gs:// through gcsfs (runtime/paths.prefer_gcsfs). Returns "cpu"
  when the run will be on the CPU backend, else "accelerator"."""
  from bert_jax.hardware import libtpu_env  # pylint: disable=g-import-not-at-top
  from bert_jax.hardware import platforms  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import paths  # pylint: disable=g-import-not-at-top
  environ = os.environ if environ is None else environ
  paths.prefer_gcsfs(environ)  # not a platform setting, but every entry point's too
  platforms.cpu_without_accelerator(environ=environ)
  libtpu_env.single_host_defaults(environ=environ)
  return "cpu" if platforms.cpu_backend(environ=environ) else "accelerator"
