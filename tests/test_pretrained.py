"""bert_jax/checkpoint/pretrained.py: the one loader of HF BERT directories and our checkpoints."""
import os

import pytest

from bert_jax.checkpoint import manager as checkpoint
from bert_jax.checkpoint import pretrained
from bert_jax.interop import hf_load
from tests.interop.hf_cases import TINY, assert_same


def test_load_encoder_hf_dir():
  cfg, params, tok = pretrained.load_encoder(TINY)
  assert cfg.deterministic and not cfg.scan_layers
  assert sorted(params) == ["embeddings", "encoder", "pooler"]
  assert tok.get_vocab_size() == 122
  cfg_only, none, tok_only = pretrained.load_encoder(os.path.join(TINY, "config.json"),
                                                     with_params=False)
  assert cfg_only == cfg and none is None and tok_only.get_vocab_size() == 122


def test_load_encoder_our_checkpoint(tmp_path, monkeypatch):
  cfg, params = hf_load.load_hf_bert(TINY, scan_layers=True)
  (tmp_path / "checkpoints").mkdir()
  calls = []

  def fake(path, with_params=True, return_meta=False):
    calls.append((path, with_params))
    out = cfg, params if with_params else None, TINY
    return out + ({"task": "bert_pretraining"},) if return_meta else out

  monkeypatch.setattr(checkpoint, "load_params_for_inference", fake)
  got_cfg, got_params, tok = pretrained.load_encoder(str(tmp_path))
  assert calls == [(str(tmp_path), True)]
  assert got_cfg == cfg.replace(scan_layers=False, deterministic=True)
  _, unrolled = hf_load.load_hf_bert(TINY, model="encoder")
  assert_same(got_params, unrolled)
  assert tok.token_to_id("[MASK]") == 4
  # Config and tokenizer only: the state is not asked for.
  got_cfg, got_params, _ = pretrained.load_encoder(str(tmp_path), with_params=False)
  assert calls[-1] == (str(tmp_path), False) and got_params is None
  assert got_cfg == cfg.replace(scan_layers=False, deterministic=True)


def test_load_pretraining_params_of_an_hf_dir():
  _, expected = hf_load.load_hf_bert(TINY, model="pretraining", allow_missing_heads=True)
  assert_same(pretrained.load_pretraining_params(TINY, nsp=True), expected)
  _, encoder = hf_load.load_hf_bert(TINY, model="encoder")
  assert_same(pretrained.load_pretraining_params(TINY, nsp=False), {"bert": encoder})


def test_bad_paths(tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    pretrained.load_encoder(str(tmp_path / "nope"))
  (tmp_path / "notes.txt").write_text("hi")
  with pytest.raises(ValueError, match=f"{tmp_path} is neither a Hugging Face BERT directory"):
    pretrained.load_encoder(str(tmp_path))


def test_a_word2vec_workdir_is_one_valueerror_naming_its_task(tmp_path, caplog):
  """init_from / embed / fill_mask on a word2vec workdir (its meta has no model_config):
  was a KeyError traceback out of `--config.init_from`. Reading logs no orbax warning
  'Given directory is read only=<workdir>' (every CLI printed it)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  ck = checkpoint.Checkpointer(str(tmp_path / "checkpoints"), async_save=False)
  ck.save(3, {"params": {"target": np.zeros((4, 2), np.float32)}}, {"task": "word2vec"})
  ck.close()
  expected = (f"{tmp_path}/checkpoints/3 is a 'word2vec' checkpoint: it holds no Transformer "
              "model (no model_config in its meta).")
  for load in (pretrained.load_encoder, checkpoint.load_params_for_inference):
    with pytest.raises(ValueError) as info, caplog.at_level("WARNING"):
      load(str(tmp_path))
    assert str(info.value) == expected
  assert caplog.records == [], caplog.text
  assert checkpoint.select_step(tmp_path / "checkpoints", [3], "best",
                                {"best_metric": "accuracy"}) == 3
  assert caplog.records == [], caplog.text


def test_a_gpt_or_translation_workdir_is_named_as_such(tmp_path):
  """init_from / embed of a GPT workdir failed on its tokenizer ('a BPE tokenizer, not
  WordPiece'), which does not say that the checkpoint is the wrong model family."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_jax.layers.config import TransformerConfig  # pylint: disable=g-import-not-at-top
  config = dataclasses.asdict(TransformerConfig(vocab_size=8, hidden_size=4, num_layers=1,
                                                num_heads=1))
  for task, family in (("lm", "a GPT"), ("translation", "an encoder-decoder Transformer")):
    ck = checkpoint.Checkpointer(str(tmp_path / task / "checkpoints"), async_save=False)
    ck.save(1, {"params": {"decoder": np.zeros((2,), np.float32)}},
            {"task": task, "model_config": config, "tokenizer_dir": None})
    ck.close()
    for with_params in (False, True):
      with pytest.raises(ValueError) as info:
        pretrained.load_encoder(str(tmp_path / task), with_params=with_params)
      assert str(info.value) == (
          f"{tmp_path / task} holds {family} (task {task}), not a BERT encoder: give a BERT "
          "pretraining or fine-tuning workdir, or a Hugging Face BERT directory.")
