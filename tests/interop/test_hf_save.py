"""HF BERT export: what we save loads back exactly and is tensor for tensor transformers'."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

from bert_jax.interop import hf_config
from bert_jax.interop import hf_layout
from bert_jax.interop import hf_load
from bert_jax.interop import hf_save
from tests.interop.hf_cases import TINY, TINY_MODEL, assert_same


@pytest.mark.parametrize("scan, multiple", [(False, 1), (True, 128)])
def test_save_load_round_trip_is_exact(tmp_path, base_params, scan, multiple):
  """multiple 128: the 122-row vocabulary imported padded to 128 rows exports unpadded."""
  cfg, params = hf_load.load_hf_bert(TINY, scan_layers=scan, vocab_multiple=multiple)
  rows = params["bert"]["embeddings"]["token_embedder"]["embedding"].shape[0]
  assert rows == cfg.padded_vocab == (128 if multiple > 1 else 122)
  boxed = {"params": params}  # a full variables dict is accepted too
  hf_save.save_hf_bert(str(tmp_path), cfg, boxed, tokenizer_or_vocab=os.path.join(TINY, "vocab.txt"))
  assert_same(hf_load.load_hf_bert(str(tmp_path))[1], base_params)
  # Tensor for tensor what transformers wrote, under the same names.
  saved = load_file(str(tmp_path / "model.safetensors"))
  original = load_file(os.path.join(TINY, "model.safetensors"))
  assert sorted(saved) == sorted(original)
  for k in original:
    np.testing.assert_array_equal(saved[k], original[k], err_msg=k)
  config = json.load(open(tmp_path / "config.json"))
  assert config["architectures"] == ["BertForPreTraining"] and config["model_type"] == "bert"
  assert hf_config.load_hf_config(str(tmp_path)) == cfg.replace(scan_layers=False,
                                                                vocab_multiple=1)
  assert (tmp_path / "vocab.txt").read_text() == open(os.path.join(TINY, "vocab.txt")).read()


def test_save_encoder_tree_as_bertmodel(tmp_path):
  cfg, params = hf_load.load_hf_bert(TINY_MODEL, model="encoder")
  hf_save.save_hf_bert(str(tmp_path), cfg, jax.tree_util.tree_map(jnp.asarray, params))
  saved = load_file(str(tmp_path / "model.safetensors"))
  original = load_file(os.path.join(TINY_MODEL, "model.safetensors"))
  assert sorted(saved) == sorted(original)
  assert json.load(open(tmp_path / "config.json"))["architectures"] == ["BertModel"]


def test_save_with_tokenizer_writes_vocab_and_json(tmp_path):
  from bert_jax.data.tokenizer import load_tokenizer
  tok = load_tokenizer(os.path.join(TINY, "vocab.txt"))
  cfg, params = hf_load.load_hf_bert(TINY)
  hf_save.save_hf_bert(str(tmp_path), cfg, params, tokenizer_or_vocab=tok)
  assert (tmp_path / "vocab.txt").read_text() == open(os.path.join(TINY, "vocab.txt")).read()
  assert json.load(open(tmp_path / "tokenizer_config.json"))["do_lower_case"] is True
  from bert_jax.checkpoint import pretrained
  _, _, loaded = pretrained.load_encoder(str(tmp_path))
  assert loaded.encode("the cat sat").ids == tok.encode("the cat sat").ids == [2, 75, 77, 79, 3]


def test_save_rejects_models_hf_bert_cannot_express(tmp_path):
  cfg, params = hf_load.load_hf_bert(TINY)
  with pytest.raises(ValueError, match="pre_ln"):
    hf_save.save_hf_bert(str(tmp_path / "a"), cfg.replace(pre_ln=True), params)
  with pytest.raises(ValueError, match="mis-shaped.*token_embedder"):
    hf_save.save_hf_bert(str(tmp_path / "b"), cfg.replace(vocab_size=100), params)
  assert not os.listdir(tmp_path)  # nothing half-written


def test_save_head_models_check_head_pooler_and_labels(tmp_path):
  """Fine-tuned trees (the names of transformers' heads: tests/test_export.py checks the
  logits) are refused when transformers' class could not load them as they are."""
  cfg, encoder = hf_load.load_hf_bert(TINY, model="encoder")
  classifier = {"kernel": np.ones((32, 3), np.float32), "bias": np.zeros(3, np.float32)}
  tree = {"bert": encoder, "classifier": classifier}
  hf_save.save_hf_bert(str(tmp_path / "ok"), cfg, tree, model="sequence_classification",
                  labels=["a", "b", "c"])
  saved = load_file(str(tmp_path / "ok" / "model.safetensors"))
  assert saved["classifier.weight"].shape == (3, 32) and "bert.pooler.dense.weight" in saved
  # Mean pooling: no pooler in our tree, while BertForSequenceClassification has one.
  no_pooler = {"bert": {k: v for k, v in encoder.items() if k != "pooler"},
               "classifier": classifier}
  with pytest.raises(ValueError, match="missing.*bert/pooler/kernel"):
    hf_save.save_hf_bert(str(tmp_path / "a"), cfg, no_pooler, model="sequence_classification",
                    labels=["a", "b", "c"])
  # Token classification has no pooler in transformers: ours must not have one either.
  with pytest.raises(ValueError, match="unexpected.*bert/pooler/kernel"):
    hf_save.save_hf_bert(str(tmp_path / "b"), cfg, tree, model="token_classification",
                    labels=["a", "b", "c"])
  with pytest.raises(ValueError, match=r"3 outputs but the label list is \['a', 'b'\]"):
    hf_save.save_hf_bert(str(tmp_path / "c"), cfg, tree, model="sequence_classification",
                    labels=["a", "b"])
  with pytest.raises(ValueError, match="duplicate names"):
    hf_save.save_hf_bert(str(tmp_path / "d"), cfg, tree, model="sequence_classification",
                    labels=["a", "b", "a"])
  assert sorted(os.listdir(tmp_path)) == ["ok"]  # nothing half-written
  # The name table holds exactly the params of each head module (else a RuntimeError).
  shapes = {m: hf_layout.expected_shapes(cfg, m, 5) for m in hf_layout.HEAD_MODELS}
  assert shapes["token_classification"]["classifier/kernel"] == (32, 5)
  assert shapes["question_answering"]["qa_outputs/kernel"] == (32, 2)
  assert "bert/pooler/kernel" not in shapes["question_answering"]
