"""Attention matrices and the `visualize attention` CLI against transformers' weights
(tests/testdata/visualize/attention_ref.npz, eager attention, output_attentions=True)."""
import os

import flax.linen as nn
import jax
import matplotlib.image
import numpy as np
import pytest

from bert_jax.layers.config import TransformerConfig
from bert_jax.models.gpt import GPT
from bert_jax.models.seq2seq import Transformer
from bert_jax.visualize import __main__ as cli
from bert_jax.visualize import attention
from tests.visualize.conftest import MINILM, TINY

SENTENCE = "[CLS] Before my bed lies a pool of moon bright"


def test_rows_sum_to_one_padding_columns_zero_and_equal_transformers(tiny, attention_ref):
  mask = attention_ref["tiny_attention_mask"]                  # [3, 16], rows padded
  w = attention.bert_weights(tiny.config, tiny.params["bert"], attention_ref["tiny_input_ids"],
                             mask, attention_ref["tiny_token_type_ids"])
  assert w.shape == attention_ref["tiny_attentions"].shape == (2, 3, 4, 16, 16)
  assert (mask == 0).any()
  np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
  padded = np.broadcast_to(mask[None, :, None, None, :] == 0, w.shape)
  assert np.all(w[padded] == 0.0)                              # exactly zero, not small
  np.testing.assert_allclose(w, attention_ref["tiny_attentions"], atol=1e-5)


def test_printed_table_equals_model_weights_real_minilm(tmp_path, capsys, attention_ref):
  png = tmp_path / "a.png"
  argv = ["attention", "--checkpoint", MINILM, "--text", SENTENCE, "--layer", "2",
          "--head", "3", "--output", str(png)]
  assert cli.main(argv) == 0
  out = capsys.readouterr().out
  table = out.split("\n", 1)[1].split("wrote")[0]
  rows, cols, matrix = attention.parse_table(table)
  want_tokens = attention_ref["minilm_tokens"].tolist()
  assert rows == cols == want_tokens and len(rows) == 10      # the 10 x 10 table
  # Two decimals: within half a unit of the last digit of transformers' weights.
  np.testing.assert_allclose(matrix, attention_ref["minilm_attentions"][2, 0, 3],
                             atol=0.005 + 1e-6)
  np.testing.assert_allclose(matrix.sum(1), 1.0, atol=0.05)
  assert matplotlib.image.imread(png).shape == (610, 690, 4)  # (6.1 x 6.9 in) at 100 dpi


def test_grid_mean_and_head_view_files(tmp_path, capsys):
  grid = tmp_path / "grid.png"
  assert cli.main(["attention", "--checkpoint", TINY, "--text", "the cat sat",
                   "--text_b", "on the mat", "--output", str(grid),
                   "--html", str(tmp_path / "h.html")]) == 0
  assert matplotlib.image.imread(grid).shape == (380, 700, 4)  # 2 layers x 4 heads
  page = (tmp_path / "h.html").read_text(encoding="utf-8")
  assert "http" not in page.split("<script>")[1]               # no network in the script
  mean = tmp_path / "mean.png"
  assert cli.main(["attention", "--checkpoint", TINY, "--text", "the cat sat", "--layer",
                   "-1", "--mean", "--output", str(mean)]) == 0
  out = capsys.readouterr().out
  assert "layer 1, mean of heads" in out
  rows, _, matrix = attention.parse_table(out.split("each row sums to 1)\n")[1].split("wrote")[0])
  assert rows[0] == "[CLS]" and rows[-1] == "[SEP]"


@pytest.mark.parametrize("argv, needle", [
    (["--layer", "2"], "--layer 2 out of range: this model has 2 layers (0..1)"),
    (["--layer", "0", "--head", "4"], "--head 4 out of range: this model has 4 heads (0..3)"),
    (["--head", "1", "--mean"], "give --head or --mean, not both"),
    (["--attention", "cross"], "--attention cross does not exist in a bert model"),
])
def test_bad_input_one_line_status_2(capsys, argv, needle):
  assert cli.main(["attention", "--checkpoint", TINY, "--text", "the cat"] + argv) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and needle in err, err


# ------------------------------------------------ GPT (causal) and encoder-decoder (cross)
def _tiny_config(**kw):
  return TransformerConfig(vocab_size=122, hidden_size=16, num_layers=2, num_heads=2,
                           mlp_dim=32, max_len=16, deterministic=True, **kw)


@pytest.fixture(scope="module")
def gpt():
  """One tiny random GPT shared by the GPT tests (inputs of length 4: one compile)."""
  config = _tiny_config(pre_ln=True)
  return config, nn.unbox(jax.jit(GPT(config).init)(jax.random.key(0),
                                                    np.zeros((1, 4), np.int32))["params"])


def test_gpt_causal_attention_tiny_random_model(gpt):
  config, params = gpt
  ids = np.array([[5, 6, 7, 0]], np.int32)
  mask = (ids > 0).astype(np.int32)
  w = attention.gpt_weights(config, params, ids, mask)          # [layers, 1, heads, 4, 4]
  assert w.shape == (2, 1, 2, 4, 4)
  np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
  future = np.triu(np.ones((4, 4), bool), k=1)
  assert np.all(w[..., future] == 0.0)
  assert np.all(w[..., :3, 3] == 0.0)                           # the padding key
  assert w[0, 0, 0, 0, 0] == pytest.approx(1.0)                 # the first token sees itself

  @jax.jit
  def both(p):  # sowing the weights does not change the model's output
    plain = GPT(config).apply({"params": p}, ids, mask)
    sown, _ = GPT(config, return_weights=True).apply({"params": p}, ids, mask,
                                                     mutable=["intermediates"])
    return plain, sown
  plain, sown = both(params)
  np.testing.assert_allclose(plain, sown, atol=1e-6)


@pytest.fixture(scope="module")
def seq2seq():
  """A tiny random encoder-decoder, scanned layers, 3 decoder layers (source 5, target 4)."""
  config = _tiny_config(position="none", scan_layers=True, num_decoder_layers=3)
  init = jax.jit(Transformer(config).init)
  return config, nn.unbox(init(jax.random.key(1), np.ones((1, 5), np.int32),
                               np.ones((1, 4), np.int32))["params"])


def test_seq2seq_cross_attention_tiny_random_model_scanned(seq2seq):
  config, params = seq2seq
  src = np.array([[5, 6, 7, 0, 0]], np.int32)                   # 2 padding source tokens
  tgt = np.array([[2, 9, 10, 11]], np.int32)
  w = attention.seq2seq_weights(config, params, src, tgt)
  assert w["cross"].shape == (3, 1, 2, 4, 5)                    # decoder layers x target x source
  assert w["encoder"].shape == (2, 1, 2, 5, 5)
  for name in ("cross", "encoder"):
    np.testing.assert_allclose(w[name].sum(-1), 1.0, atol=1e-6)
    assert np.all(w[name][..., 3:] == 0.0)                      # padded source columns
  assert np.all(w["self"][..., np.triu(np.ones((4, 4), bool), k=1)] == 0.0)
  # Each decoder layer has its own cross-attention (the scanned stack was unstacked).
  assert not np.allclose(w["cross"][0], w["cross"][1])


def test_cli_reads_a_seq2seq_workdir_cross_attention_table(tmp_path, capsys, seq2seq, tiny):
  from tests.visualize.workdirs import save_workdir  # pylint: disable=g-import-not-at-top
  config, params = seq2seq
  workdir = save_workdir(str(tmp_path / "mt"), params, config, "translation", TINY)
  argv = ["attention", "--checkpoint", workdir, "--text", "the cat sat on the",
          "--layer", "2", "--head", "1", "--output", str(tmp_path / "x.png")]
  assert cli.main(argv + ["--text_b", "a dog sat ."]) == 0
  out = capsys.readouterr().out
  assert out.startswith("cross-attention (target x source), layer 2, head 1")
  rows, cols, matrix = attention.parse_table(out.split("\n", 1)[1].split("wrote")[0])
  assert rows == ["a", "dog", "sat", "."] and cols == ["the", "cat", "sat", "on", "the"]
  src = [tiny.tokenizer.encode("the cat sat on the", add_special_tokens=False).ids]
  tgt = tiny.tokenizer.encode("a dog sat .", add_special_tokens=False).ids
  tgt_in = [[attention.bos_id(tiny.tokenizer)] + tgt[:-1]]     # teacher forcing
  want = attention.seq2seq_weights(config, params, src, tgt_in)["cross"][2, 0, 1]
  np.testing.assert_allclose(matrix, want, atol=0.005 + 1e-6)
  assert cli.main(argv) == 2                                    # no target sentence
  assert "needs --text_b" in capsys.readouterr().err


def test_cli_reads_a_gpt_workdir(tmp_path, capsys, gpt):
  """Our workdirs of other families load by their param tree; config.task is kept."""
  from tests.visualize.workdirs import save_workdir  # pylint: disable=g-import-not-at-top
  config, params = gpt                                          # unboxed, as the loop saves
  workdir = save_workdir(str(tmp_path / "lm"), params, config, "lm", TINY)
  assert cli.main(["attention", "--checkpoint", workdir, "--text", "the cat sat on",
                   "--layer", "1", "--head", "0", "--output", str(tmp_path / "g.png")]) == 0
  out = capsys.readouterr().out
  assert out.startswith("causal self-attention, layer 1, head 0")
  rows, cols, matrix = attention.parse_table(out.split("\n", 1)[1].split("wrote")[0])
  assert rows == cols == ["the", "cat", "sat", "on"]
  assert np.all(np.triu(matrix, k=1) == 0.0)
  assert cli.main(["attention", "--checkpoint", workdir, "--text", "the cat",
                   "--text_b", "sat"]) == 2
  assert "not GPT" in capsys.readouterr().err


def test_cli_reads_a_gpt_workdir_with_its_byte_level_bpe(tmp_path, capsys, gpt):
  """What a GPT run saves: a byte-level BPE tokenizer (here GPT-2's files of tiny_gpt2),
  not WordPiece: it was a ValueError traceback ('a BPE tokenizer, not WordPiece')."""
  from tests.visualize.workdirs import save_workdir  # pylint: disable=g-import-not-at-top
  config, params = gpt
  bpe = os.path.join(os.path.dirname(TINY), "tiny_gpt2")        # vocab.json + merges.txt
  workdir = save_workdir(str(tmp_path / "lm"), params, config, "lm", bpe)
  assert cli.main(["attention", "--checkpoint", workdir, "--text", "xqzj", "--layer", "0",
                   "--head", "1", "--output", str(tmp_path / "g.png")]) == 0
  out = capsys.readouterr().out
  rows, cols, matrix = attention.parse_table(out.split("\n", 1)[1].split("wrote")[0])
  assert rows == cols == ["x", "q", "z", "j"]                   # ids 88 81 90 74 < 122
  ids = np.asarray([[88, 81, 90, 74]], np.int32)
  want = attention.gpt_weights(config, params, ids, np.ones_like(ids))[0, 0, 1]
  np.testing.assert_allclose(matrix, want, atol=0.005 + 1e-6)
