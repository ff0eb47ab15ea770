"""Fuzzed vocab.txt / tokenizer.json / tokenizer_config.json / config.json loading
(data/tokenizer.py load_tokenizer, pretrained.py load_encoder)."""
import json
import os
import pathlib
import tempfile

from hypothesis import example, given, strategies as st
from tokenizers import Tokenizer

from bert_jax.checkpoint import pretrained
from bert_jax.data.tokenizer import SPECIAL_TOKENS, load_tokenizer
from tests.fuzz.strategies import FUZZ, file_bytes, json_values, write

SPECIALS = "\n".join(SPECIAL_TOKENS).encode() + b"\n"
vocab_bytes = st.one_of(file_bytes, file_bytes.map(lambda b: SPECIALS + b))
TOKENIZER_KEYS = ("model", "type", "vocab", "unk_token", "normalizer", "pre_tokenizer",
                  "version", "added_tokens", "do_lower_case", "WordPiece")
HF_CONFIG_KEYS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers",
                  "num_attention_heads", "intermediate_size", "max_position_embeddings",
                  "hidden_act", "type_vocab_size", "layer_norm_eps")


def check_loader(load, *names):
  """load() returns a working tokenizer, or raises one clear error naming a file."""
  try:
    result = load()
  except (ValueError, FileNotFoundError) as e:
    message = str(e)
    assert any(os.fspath(n) in message for n in names), message
    assert len(message.strip().splitlines()) == 1, message
    return None
  tok = result[2] if isinstance(result, tuple) else result
  if tok is not None:
    assert isinstance(tok, Tokenizer)
    ids = tok.encode("Hello, world! \u00e9t\u00e9 \x00").ids
    assert ids[0] == tok.token_to_id("[CLS]") and ids[-1] == tok.token_to_id("[SEP]")
  return result


def _folder(tmp_path) -> pathlib.Path:
  return pathlib.Path(tempfile.mkdtemp(dir=tmp_path))  # one per example: no leftovers


@FUZZ
@given(vocab=vocab_bytes, lowercase=st.sampled_from([None, True, False]))
@example(vocab=SPECIALS + b"\xff\xfe\n##a\n", lowercase=None)
@example(vocab=SPECIALS + SPECIALS + b"a\n", lowercase=None)
@example(vocab=b"", lowercase=None)
def test_vocab_txt(tmp_path, vocab, lowercase):
  path = write(_folder(tmp_path) / "vocab.txt", vocab)
  check_loader(lambda: load_tokenizer(path, lowercase=lowercase), path)


@FUZZ
@given(vocab=vocab_bytes,
       config=st.one_of(file_bytes,
                        json_values(TOKENIZER_KEYS).map(lambda v: json.dumps(v).encode())))
@example(vocab=SPECIALS, config=b'{"do_lower_case": "yes"}')
@example(vocab=SPECIALS, config=b"\xff")
def test_vocab_dir_with_tokenizer_config(tmp_path, vocab, config):
  folder = _folder(tmp_path)
  write(folder / "vocab.txt", vocab)
  write(folder / "tokenizer_config.json", config)
  check_loader(lambda: load_tokenizer(str(folder)), str(folder))


def _wordpiece_json(vocab):
  return {"version": "1.0", "model": {"type": "WordPiece", "unk_token": "[UNK]",
                                      "continuing_subword_prefix": "##",
                                      "max_input_chars_per_word": 100, "vocab": vocab}}


@FUZZ
@given(content=st.one_of(
    file_bytes,
    json_values(TOKENIZER_KEYS).map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.text(max_size=4), st.integers(-3, 50), max_size=8).map(
        lambda v: json.dumps(_wordpiece_json(v)).encode())))
@example(content=json.dumps(_wordpiece_json({"a": 0})).encode())
@example(content=json.dumps(_wordpiece_json(
    {t: i for i, t in enumerate(SPECIAL_TOKENS)})).encode())
def test_tokenizer_json(tmp_path, content):
  path = write(_folder(tmp_path) / "tokenizer.json", content)
  check_loader(lambda: load_tokenizer(path), path)


@FUZZ
@given(config=st.one_of(file_bytes, json_values(HF_CONFIG_KEYS).map(
    lambda v: json.dumps(v).encode())))
@example(config=b"{}")
@example(config=b'{"model_type": "bert", "vocab_size": "many"}')
def test_hf_config_json(tmp_path, config):
  folder = _folder(tmp_path)
  write(folder / "config.json", config)
  write(folder / "vocab.txt", SPECIALS + b"hello\n")
  result = check_loader(lambda: pretrained.load_encoder(str(folder), with_params=False),
                        str(folder))
  if result is not None:
    assert result[1] is None  # with_params=False reads no weights
