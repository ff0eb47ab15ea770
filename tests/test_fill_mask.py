"""The fill-mask CLI: the top-k it prints, the held-out accuracy of a workdir, bad input."""
import os
import shutil

import numpy as np
import pytest

from bert_jax import fill_mask
from bert_jax.inference import fill_mask as fill_mask_lib
from bert_jax.inference import loader

HF = os.path.join(os.path.dirname(__file__), "testdata", "hf")
TINY = os.path.join(HF, "tiny_bert")


@pytest.fixture(scope="module")
def tiny():
  return loader.load(TINY)


def test_cli_top_k_per_mask(tiny, capsys):
  text = "the cat sat on the [MASK] . [MASK] is"
  assert fill_mask.main(["--checkpoint", TINY, "--text", text, "--top_k", "3"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == text and lines[1].startswith("  [MASK] 1: ") and len(lines) == 3
  # The printed candidates are the 3 most probable tokens at each [MASK] position.
  ids = [2] + tiny.tokenizer.encode(text, add_special_tokens=False).ids + [3]
  positions = [i for i, t in enumerate(ids) if t == 4]
  probs = fill_mask_lib.mask_probabilities(tiny.config, tiny.params, [ids], [positions])[0]
  for line, row in zip(lines[1:], probs):
    printed = line.split(": ", 1)[1].split("  ")
    best = np.argsort(-row)[:3]
    assert printed == [f"{tiny.tokenizer.id_to_token(int(i))} {row[i]:.3f}" for i in best]


def test_our_workdir_prints_held_out_accuracy(tmp_path, tiny, capsys):
  from tests.visualize.workdirs import save_workdir  # pylint: disable=g-import-not-at-top
  params = {"bert": tiny.params["bert"], "mlm_head": tiny.params["mlm_head"]}
  workdir = save_workdir(str(tmp_path / "w"), params, tiny.config, "bert_pretraining", TINY,
                         eval_rows=[{"step": 1, "train/loss": 4.0},
                                    {"step": 1, "eval/mlm_accuracy": 0.125}])
  assert fill_mask.main(["--checkpoint", workdir, "--text", "the [MASK] sat"]) == 0
  out = capsys.readouterr().out
  assert "held-out MLM accuracy: 0.1250 (step 1" in out
  hf = fill_mask_lib.fill(tiny, "the [MASK] sat", 5)
  assert out.splitlines()[1] == "  [MASK]: " + "  ".join(f"{t} {p:.3f}" for t, p in hf[0])


def test_bad_input_one_line_status_2(tmp_path, capsys):
  no_head = tmp_path / "encoder_only"          # BertModel weights + vocab: no MLM head
  shutil.copytree(os.path.join(HF, "tiny_bert_model"), no_head)
  shutil.copy(os.path.join(TINY, "vocab.txt"), no_head)
  for argv, needle in [
      (["--checkpoint", str(no_head), "--text", "the [MASK]"], "has no MLM head"),
      (["--checkpoint", TINY, "--text", "the cat sat"], "no [MASK] in the text 'the cat sat'"),
      (["--checkpoint", TINY, "--text", "the [MASK]", "--top_k", "0"], "--top_k must be >= 1"),
      (["--checkpoint", str(tmp_path / "nope"), "--text", "[MASK]"], "does not exist")]:
    assert fill_mask.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fill_mask: error: ") and err.count("\n") == 1 and needle in err, err
