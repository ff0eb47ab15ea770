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


def test_a_workdir_that_is_a_file_is_one_error(tmp_path):
  """Was a FileExistsError traceback from the run's first mkdir; the file is left alone."""
  notes = tmp_path / "notes.txt"
  notes.write_text("mine")
  with pytest.raises(ValueError) as info:
    paths.check_workdir(str(notes))
  assert str(info.value) == (f"--workdir {notes} is a file, not a directory: give a new or "
                             "an existing run directory.")
  assert notes.read_text() == "mine"
  paths.check_workdir(str(tmp_path))            # an existing run directory
  paths.check_workdir(str(tmp_path / "new"))    # created by the run


def test_a_missing_data_file_is_named_with_its_key(tmp_path):
  """Was '[Errno 2] No such file or directory: ...' from the reader, naming no key."""
  train = tmp_path / "train.csv"
  train.write_text("text,label\n")
  config = ml_collections.ConfigDict({"init_from": "", "data": {
      "source": "file", "train_file": str(train), "eval_file": str(tmp_path / "dev.csv")}})
  with pytest.raises(FileNotFoundError) as info:
    paths.check_config(config)
  assert str(info.value) == f"config.data.eval_file: {tmp_path}/dev.csv does not exist."
  config.data.eval_file = f"{train},{tmp_path}/x.tgt"  # translation's source,target pair
  with pytest.raises(FileNotFoundError, match=r"eval_file: .*/x.tgt does not exist"):
    paths.check_config(config)
  config.data.eval_file = str(train)
  paths.check_config(config)
  config.data.source = "tfds"  # names of datasets, not files
  config.data.eval_file = "nope"
  paths.check_config(config)
