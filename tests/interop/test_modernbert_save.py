"""Our ModernBERT trees -> transformers ModernBERT directories: what we save loads back
exactly, is tensor for tensor transformers' own file, and transformers ran it
(modernbert_export.npz, scripts/make_modernbert_fixtures.py step 2)."""
import hashlib
import json
import os

import jax
import ml_collections
import numpy as np
import pytest
from safetensors.numpy import load_file

from bert_jax.interop import modernbert
from bert_jax.interop import modernbert_save
from bert_jax.models import modernbert as models
from tests.interop.hf_cases import TINY as TINY_BERT
from tests.interop.hf_cases import assert_same
from tests.interop.modernbert_cases import (BIAS, EXPORT_OUTPUTS, LABELS, OUTPUTS, TINY,
                                            write_exports)

TOL = 1e-4  # float32 both sides (test_modernbert.py)
SOURCES = {"masked_lm": TINY, "sequence_classification": BIAS, "token_classification": BIAS}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_save_load_round_trip_is_exact(tmp_path, kind):
  """The vocabulary imported padded (192 rows) is exported as transformers' 128."""
  cfg, params = modernbert.load_modernbert(SOURCES[kind], model=kind, vocab_multiple=96)
  assert params["model"]["embeddings"]["tok_embeddings"]["embedding"].shape == (192, 32)
  boxed = {"params": jax.tree_util.tree_map(np.asarray, params)}  # a variables dict too
  written = modernbert_save.save_modernbert(str(tmp_path / "out"), cfg, boxed, model=kind,
                                            labels=LABELS.get(kind))
  assert written["architectures"] == [modernbert.MODELS[kind]]
  assert_same(modernbert.load_modernbert(str(tmp_path / "out"), model=kind,
                                         vocab_multiple=96)[1], params)
  assert modernbert.load_modernbert_config(str(tmp_path / "out")) == cfg.replace(
      vocab_multiple=1)
  # Tensor for tensor (names, dtypes, values) what transformers wrote.
  saved = load_file(str(tmp_path / "out" / "model.safetensors"))
  original = load_file(os.path.join(SOURCES[kind], "model.safetensors"))
  assert sorted(saved) == sorted(original)
  for name, value in original.items():
    np.testing.assert_array_equal(saved[name], value, err_msg=name)
  if kind != "masked_lm":
    assert written["id2label"] == {str(i): n for i, n in enumerate(LABELS[kind])}


def test_an_encoder_tree_saves_as_modernbertmodel(tmp_path):
  cfg, params = modernbert.load_modernbert(TINY)
  written = modernbert_save.save_modernbert(str(tmp_path / "enc"), cfg,
                                            {"model": params["model"]})
  assert written["architectures"] == ["ModernBertModel"]
  saved = load_file(str(tmp_path / "enc" / "model.safetensors"))
  assert "embeddings.tok_embeddings.weight" in saved and "head.dense.weight" not in saved
  assert_same(modernbert.load_modernbert(str(tmp_path / "enc"), model="encoder")[1],
              params["model"])


def _sha256(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def test_transformers_ran_these_exports(tmp_path):
  """Our exports, written again, are the bytes transformers loaded (every tensor read, none
  fresh: asserted by the fixture script), and our model on them gives its outputs."""
  ref, inputs = dict(np.load(EXPORT_OUTPUTS)), np.load(OUTPUTS)
  ids, mask = inputs["input_ids"], inputs["attention_mask"]
  real = mask.astype(bool)
  write_exports(str(tmp_path))
  errors = {}
  for kind in ("masked_lm", "sequence_classification", "token_classification"):
    for name in ("model.safetensors", "config.json"):
      assert _sha256(tmp_path / kind / name) == str(ref[f"{kind}/sha256/{name}"]), (kind, name)
    cfg, params = modernbert.load_modernbert(str(tmp_path / kind), model=kind,
                                             deterministic=True)
    module = {"masked_lm": models.ModernBertForMaskedLM(cfg),
              "sequence_classification": models.ModernBertForSequenceClassification(cfg, 3),
              "token_classification": models.ModernBertForTokenClassification(cfg, 3)}[kind]
    with jax.default_matmul_precision("float32"):
      out = module.apply({"params": params}, ids, mask)
    got = np.asarray(out["mlm_logits" if kind == "masked_lm" else "logits"], np.float64)
    diff = np.abs(got - ref[f"{kind}/logits"])
    errors[kind] = float((diff if kind == "sequence_classification" else diff[real]).max())
  assert max(errors.values()) < TOL, f"max abs errors {errors}"
  print("export: max abs errors", {k: f"{v:.2e}" for k, v in errors.items()})


def test_a_tokenizer_object_and_the_special_ids(tmp_path):
  ref = np.load(OUTPUTS)
  cfg, params = modernbert.load_modernbert(TINY)
  tok = modernbert.load_tokenizer(TINY)
  written = modernbert_save.save_modernbert(str(tmp_path / "out"), cfg, params, tok)
  assert [written[f"{n}_token_id"] for n in ("pad", "cls", "sep", "bos", "eos")] == [
      3, 1, 2, 1, 2]
  config = json.load(open(tmp_path / "out" / "tokenizer_config.json"))
  assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
  assert config["model_input_names"] == ["input_ids", "attention_mask"]  # no token types
  assert config["mask_token"] == "[MASK]" and config["model_max_length"] == 64
  again = modernbert.load_tokenizer(str(tmp_path / "out"))
  assert again.encode(str(ref["text"])).ids == ref["text_ids"].tolist()


def test_without_a_window_every_layer_is_global():
  cfg = modernbert.load_modernbert_config(TINY)
  hf = modernbert_save.modernbert_config_dict(cfg.replace(local_window=0), ["ModernBertModel"])
  assert hf["global_attn_every_n_layers"] == 1  # transformers: window 0 would be the token
  assert modernbert_save.modernbert_config_dict(cfg, [])["global_attn_every_n_layers"] == 3


def test_refusals_write_nothing(tmp_path):
  cfg, params = modernbert.load_modernbert(TINY)
  taken = tmp_path / "taken"
  taken.mkdir()
  (taken / "notes.txt").write_text("mine")
  with pytest.raises(ValueError, match="exists and is not an empty directory"):
    modernbert_save.save_modernbert(str(taken), cfg, params)
  assert os.listdir(taken) == ["notes.txt"]
  with pytest.raises(ValueError, match="no transformers ModernBertConfig equivalent: "
                                       "family='bert'"):
    modernbert_save.save_modernbert(str(tmp_path / "a"), cfg.replace(family="bert"), params)
  broken = dict(params, model={k: v for k, v in params["model"].items() if k != "final_norm"})
  with pytest.raises(ValueError, match=r"missing model/final_norm/scale$"):
    modernbert_save.save_modernbert(str(tmp_path / "b"), cfg, broken)
  _, seq = modernbert.load_modernbert(BIAS, model="sequence_classification")
  bias_cfg = modernbert.load_modernbert_config(BIAS)
  with pytest.raises(ValueError, match="a classifier tree: pass model="):
    modernbert_save.save_modernbert(str(tmp_path / "c"), bias_cfg, seq)
  with pytest.raises(ValueError, match=r"label list is \['a'\]"):
    modernbert_save.save_modernbert(str(tmp_path / "d"), bias_cfg, seq,
                                    model="token_classification", labels=["a"])
  assert sorted(os.listdir(tmp_path)) == ["taken"]


def test_the_export_command_writes_a_modernbert_pretraining_run(tmp_path):
  """bert_jax/apps/export.py's writer on a ModernBERT MLM tree with the WordPiece vocab a
  pretraining run here has: ModernBertForMaskedLM + BERT's tokenizer files."""
  from bert_jax.apps import export
  from bert_jax.data.tokenizer import load_tokenizer
  cfg, params = modernbert.load_modernbert(TINY)
  cfg = cfg.replace(vocab_size=122)                  # tiny_bert's vocab.txt
  params = dict(params, decoder_bias=params["decoder_bias"][:122], model=dict(
      params["model"], embeddings=dict(params["model"]["embeddings"], tok_embeddings={
          "embedding": params["model"]["embeddings"]["tok_embeddings"]["embedding"][:122]})))
  run = ml_collections.ConfigDict({"task": "bert_pretraining", "data": {
      "vocab_path": os.path.join(TINY_BERT, "vocab.txt"), "lowercase": True}})
  out = str(tmp_path / "hf")
  os.makedirs(out)  # export.export's staging directory: new and empty
  assert export._write(run, "step", out, cfg, params, None) == "ModernBertForMaskedLM"
  assert_same(modernbert.load_modernbert(out)[1], params)
  tok = modernbert.load_tokenizer(out)                 # vocab.txt + WordPiece tokenizer.json
  assert tok.encode("the cat sat").ids == load_tokenizer(TINY_BERT).encode("the cat sat").ids
  config = json.load(open(os.path.join(out, "tokenizer_config.json")))
  assert config["model_input_names"] == ["input_ids", "attention_mask"]
