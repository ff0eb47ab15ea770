"""Fixtures of the HF interop tests."""
import pytest

from bert_jax.interop import hf_layout
from bert_jax.interop import hf_load
from tests.interop.hf_cases import TINY


@pytest.fixture(scope="module")
def base_params():
  """The flat params of tiny_bert as the loader reads them: what every layout must equal."""
  return hf_layout.plain_flat(hf_load.load_hf_bert(TINY)[1])
