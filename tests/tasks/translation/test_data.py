"""The translation data: numbers corpus, file readers' bad-input handling, vocabulary."""
import numpy as np
import pytest

from bert_jax.tasks.translation import data


def test_numbers_corpus_reorders_and_is_deterministic():
  # num2words' German spells the units before the tens ("one-and-twenty"): reordering.
  pair = data.number_pair(321)
  assert (pair.source, pair.target) == ("dreihunderteinundzwanzig",
                                        "three hundred and twenty-one")
  a, _ = data.numbers_pairs("validation", 20, seed=3)
  b, _ = data.numbers_pairs("validation", 20, seed=3)
  assert a == b and len({p.where for p in a}) == 20


def test_numbers_splits_partition_the_range_by_hash():
  splits = {s: data.split_numbers(s) for s in ("train", "validation", "test")}
  sets = {s: set(v.tolist()) for s, v in splits.items()}
  assert not sets["train"] & sets["test"]
  assert not sets["train"] & sets["validation"]
  assert not sets["validation"] & sets["test"]
  assert sum(map(len, sets.values())) == data.NUMBERS_MAX
  # ~90/5/5 and a split is a function of the number alone (crc32 of its digits).
  assert abs(len(sets["test"]) / data.NUMBERS_MAX - 0.05) < 0.005
  import zlib
  n = int(splits["test"][123])
  assert 95 <= zlib.crc32(str(n).encode()) % 100 < 100
  # A sample drawn for the test split never contains a training number.
  sample = data.numbers_sample("test", 500, seed=0)
  assert not set(sample.tolist()) & sets["train"]


def test_tsv_reader_counts_bad_lines_and_names_file_and_line(tmp_path):
  path = tmp_path / "pairs.tsv"
  path.write_bytes(b"eins\tone\n\n\ttwo\ndrei\t\nvier \xff\tfour\n")
  pairs, log = data.read_tsv(str(path))
  assert [(p.source, p.target) for p in pairs] == [("eins", "one"), ("vier \ufffd", "four")]
  assert log.skipped == {"empty_line": 1, "empty_source": 1, "empty_target": 1}
  assert log.notes["non_utf8_replaced"] == 1
  bad = tmp_path / "bad.tsv"
  bad.write_text("eins\tone\nzwei two\n", encoding="utf-8")
  with pytest.raises(ValueError, match=rf"{bad}:2: no tab"):
    data.read_tsv(str(bad))


def test_aligned_files_must_have_equal_line_counts(tmp_path):
  src, tgt = tmp_path / "a.de", tmp_path / "a.en"
  src.write_text("eins\nzwei\n", encoding="utf-8")
  tgt.write_text("one\ntwo\n", encoding="utf-8")
  pairs, _ = data.read_file_split(f"{src},{tgt}")
  assert [p.target for p in pairs] == ["one", "two"]
  tgt.write_text("one\n", encoding="utf-8")
  with pytest.raises(ValueError, match="has 2 lines but"):
    data.read_aligned(str(src), str(tgt))


def test_vocabulary_round_trips_and_truncation_is_counted():
  pairs, _ = data.numbers_pairs("train", 300)
  tok = data.train_tokenizer((t for p in pairs for t in (p.source, p.target)), 120)
  assert [tok.token_to_id(t) for t in data.SPECIAL_TOKENS] == [0, 1, 2, 3]
  targets = [p.target for p in pairs[:50]]
  ids = data.encode(tok, targets, 40)
  # </s> closes every row, 0 pads it, and decoding restores the exact text.
  lengths = (ids > 0).sum(1)
  assert (ids[np.arange(50), lengths - 1] == data.EOS).all()
  assert data.decode(tok, ids) == targets
  from bert_jax.tasks.skiplog import SkipLog
  log = SkipLog("t")
  cut = data.encode(tok, targets, 3, log)
  assert (cut[:, -1] == data.EOS).all() and log.notes["truncated"] == 50


def test_a_workdir_holding_another_tasks_vocabulary_is_named(tmp_path):
  """A tokenizer.json that is not a translation vocabulary (here a WordPiece one, as GPT's
  or BERT's workdir holds) is refused with its path, not trained over or used."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.translation import batches  # pylint: disable=g-import-not-at-top
  wordpiece = tokenizers.Tokenizer(tokenizers.models.WordPiece(
      {"[PAD]": 0, "[UNK]": 1, "the": 2}, unk_token="[UNK]"))
  path = tmp_path / "tokenizer" / "tokenizer.json"
  path.parent.mkdir()
  wordpiece.save(str(path))
  before = path.read_bytes()
  with pytest.raises(ValueError, match=r"tokenizer\.json is not a translation vocabulary.*"
                     r"another task's workdir"):
    batches.load_or_train_tokenizer(None, str(path.parent), lambda: [], write=True)
  assert path.read_bytes() == before  # nothing saved is lost
