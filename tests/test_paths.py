"""bert_jax/runtime/paths.py: the start-up check of a run config's paths."""
import ml_collections
import pytest

from bert_jax.runtime import paths


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


def test_a_file_written_in_pieces_replaces_the_old_one_whole_or_not_at_all(
    tmp_path, monkeypatch):
  """open_atomically (word vectors, exported weights): an error part-way leaves the old
  file and no `.tmp`; a finished block replaces it. The word2vec writer goes through it,
  so a rerun killed while it writes a finished run's vectors again keeps them."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_jax.word2vec import vectors  # pylint: disable=g-import-not-at-top
  path = tmp_path / "out" / "vectors.txt"
  opened = []
  real = paths.open_atomically
  monkeypatch.setattr(paths, "open_atomically", lambda p: opened.append(p) or real(p))
  vectors.save_word2vec_format(str(path), ["a", "b"], np.eye(2, dtype=np.float32))
  assert opened == [str(path)]
  old = path.read_bytes()
  assert old.startswith(b"2 2\na 1 0\n")
  with pytest.raises(RuntimeError, match="killed"):
    with real(path) as f:
      f.write(b"3 2\na 0 1\n")
      raise RuntimeError("killed part-way")
  assert path.read_bytes() == old and sorted(p.name for p in path.parent.iterdir()) == [
      "vectors.txt"]
  with real(path) as f:
    f.write(b"new")
  assert path.read_bytes() == b"new"
  paths.write_atomically(path, "text")
  assert path.read_text() == "text"
