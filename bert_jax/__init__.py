"""bert_jax: BERT and the Transformer family in JAX/Flax.

The Python API (bert_jax/api.py), imported on first use so `import bert_jax` stays cheap
(no JAX until a model is loaded):

  import bert_jax
  model = bert_jax.load("all-MiniLM-L6-v2")   # or our workdir, or an HF BERT directory
  vectors = model.encode(["The cat sat on the mat."])   # [1, 384] float32

The CLIs are `python -m bert_jax.<cli>` or, installed, the bert-jax-* console scripts
(pyproject.toml [project.scripts]). Importing bert_jax changes nothing in the process:
the entry points call bert_jax.hardware.configure() themselves.
"""
import os as _os

__all__ = ["load", "Model"]

# The user commands live in bert_jax/apps/ and keep their names: `python -m bert_jax.embed`,
# `from bert_jax import export`. The package looks for its submodules there too.
__path__.append(_os.path.join(__path__[0], "apps"))


def __getattr__(name):
  # PEP 562: only these two names load the API (and JAX); submodules import as usual.
  if name in __all__:
    from bert_jax import api  # pylint: disable=g-import-not-at-top
    return getattr(api, name)
  raise AttributeError(f"module 'bert_jax' has no attribute {name!r}")
