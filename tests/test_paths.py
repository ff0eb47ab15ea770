"""bert_jax/paths.py: the start-up check of a run config's paths."""
import ml_collections
import pytest

from bert_jax import paths


def test_a_missing_init_from_is_named_at_start_up(tmp_path):
  """Was 'Checkpoint path X does not exist.' after the data was prepared, not naming the key."""
  config = ml_collections.ConfigDict({"init_from": str(tmp_path / "nope"), "data": {}})
  with pytest.raises(FileNotFoundError) as info:
    paths.check_config(config)
  assert str(info.value) == (f"config.init_from {tmp_path}/nope does not exist (give one of "
                             "our workdirs or a Hugging Face BERT directory).")
  config.init_from = str(tmp_path)  # exists: the loader decides what it holds
  paths.check_config(config)
  config.init_from = ""  # from scratch
  paths.check_config(config)
