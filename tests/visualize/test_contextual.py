"""`visualize contextual` with the real all-MiniLM-L6-v2 weights: "bank" by the river is
farther from "bank" with money than two money "bank"s are from each other."""
import matplotlib.image
import numpy as np

from bert_jax.word2vec.vectors import save_word2vec_format
from bert_jax.visualize import __main__ as cli
from bert_jax.visualize import contextual
from tests.visualize.conftest import MINILM

RIVER = "I was sitting by the river bank"
MONEY = ["I went to the bank to deposit money", "The bank approved my loan"]


def test_bank_river_vs_money_real_minilm(minilm):
  sim = contextual.cosine_matrix(contextual.word_vectors(minilm, "bank", [RIVER] + MONEY))
  # Measured: river-money 0.787 / 0.784, money-money 0.812.
  assert sim[0, 1] < sim[1, 2] and sim[0, 2] < sim[1, 2], sim
  np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-5)


def test_pieces_are_averaged_and_match_embed_per_token_vectors(minilm):
  from bert_jax.inference import encode  # pylint: disable=g-import-not-at-top
  sentence = "contextual embeddings differ"
  got = contextual.word_vectors(minilm, "embeddings", [sentence])[0]
  ids = np.array(minilm.tokenizer.encode(f"[CLS] {sentence} [SEP]",
                                         add_special_tokens=False).ids, np.int32)
  tokens = minilm.tokenizer.encode("embeddings", add_special_tokens=False).tokens
  assert len(tokens) > 1                                           # a split word
  vectors = encode.run_model(minilm.config, minilm.params["bert"], [ids], pooling="none")[0]
  where = contextual.find_pieces(minilm.tokenizer.encode(
      f"[CLS] {sentence} [SEP]", add_special_tokens=False).tokens, tokens)
  np.testing.assert_allclose(got, vectors[where].mean(0), atol=1e-6)


def test_cli_with_word2vec_vectors_and_bad_input(tmp_path, capsys):
  w2v = tmp_path / "v.txt"
  save_word2vec_format(str(w2v), ["bank", "river"], np.eye(2, 3, dtype=np.float32))
  png = tmp_path / "c.png"
  argv = ["contextual", "--checkpoint", MINILM, "--word", "bank", "--sentence", RIVER,
          "--sentence", MONEY[0], "--vectors", str(w2v), "--output", str(png)]
  assert cli.main(argv) == 0
  assert "cosine 1.00 between every pair" in capsys.readouterr().out
  assert matplotlib.image.imread(png).shape[2] == 4
  assert cli.main(argv[:3] + ["--word", "money", "--sentence", RIVER, "--sentence",
                              MONEY[0]]) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "--word 'money' (tokens money) is not in sentence 1" in err
