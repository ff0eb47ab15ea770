"""HF BERT import/export against transformers' own outputs (fixtures, no torch here).

tests/testdata/hf/ comes from scripts/make_hf_fixtures.py (transformers 4.57.6 and 5.23.0):
a random tiny BertForPreTraining, its outputs on a padded batch, and re-saved variants.
"""
import json
import logging
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_jax.interop import hf
from bert_jax.interop import hf_layout
from bert_jax.models.bert import BertForPreTraining, BertModel

HF_DATA = os.path.join(os.path.dirname(__file__), "..", "testdata", "hf")
TINY = os.path.join(HF_DATA, "tiny_bert")              # BertForPreTraining, transformers 4.57
TINY_MODEL = os.path.join(HF_DATA, "tiny_bert_model")  # its BertModel, no prefix / heads
TINY_V5 = os.path.join(HF_DATA, "tiny_bert_v5")        # re-saved by transformers 5.23
ATOL = 1e-5


@pytest.fixture(scope="module")
def ref():
  return dict(np.load(os.path.join(HF_DATA, "tiny_bert_outputs.npz")))


@pytest.fixture(scope="module")
def base_params():
  return hf_layout.plain_flat(hf.load_hf_bert(TINY)[1])


def _checkpoint(tmp_path, tensors, config_from=TINY):
  """A checkpoint dir holding `tensors` and the tiny config."""
  out = tmp_path / "ckpt"
  out.mkdir(parents=True)
  shutil.copy(os.path.join(config_from, "config.json"), out / "config.json")
  save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
  return str(out)


def _assert_same(a, b):
  a, b = hf_layout.plain_flat(a), hf_layout.plain_flat(b)
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# ---------------------------------------------------------------------------- config
def test_config_maps_every_field():
  cfg = hf.load_hf_config(TINY)
  assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.d_head,
          cfg.d_mlp, cfg.max_len, cfg.type_vocab_size) == (122, 32, 2, 4, 8, 37, 64, 2)
  assert (cfg.activation, cfg.layer_norm_eps, cfg.dropout_rate,
          cfg.attention_dropout_rate) == ("gelu", 1e-12, 0.1, 0.1)
  assert cfg.position == "learned" and not cfg.pre_ln


@pytest.mark.parametrize("act,ours", [("gelu_new", "gelu_tanh"), ("relu", "relu"),
                                      ("gelu_pytorch_tanh", "gelu_tanh")])
def test_config_activations(tmp_path, act, ours):
  with open(os.path.join(TINY, "config.json")) as f:
    config = dict(json.load(f), hidden_act=act, hidden_dropout_prob=0.3)
  (tmp_path / "config.json").write_text(json.dumps(config))
  cfg = hf.load_hf_config(str(tmp_path))
  assert cfg.activation == ours and cfg.dropout_rate == 0.3


@pytest.mark.parametrize("field,value,needle", [
    ("position_embedding_type", "relative_key", "position_embedding_type 'relative_key'"),
    ("hidden_act", "silu", "hidden_act 'silu'"),
    ("model_type", "roberta", "model_type 'roberta'")])
def test_config_rejects_what_we_cannot_run(tmp_path, field, value, needle):
  with open(os.path.join(TINY, "config.json")) as f:
    config = dict(json.load(f), **{field: value})
  (tmp_path / "config.json").write_text(json.dumps(config))
  with pytest.raises(ValueError, match=needle):
    hf.load_hf_config(str(tmp_path))


# ---------------------------------------------------------------------------- numerics
def _forward(cfg):
  """One compiled graph: encoder outputs + MLM logits at all positions / at None."""
  def run(params, ids, mask, segs):
    enc = BertModel(cfg).apply({"params": params["bert"]}, ids, mask, segs,
                               output_hidden_states=True)
    model = BertForPreTraining(cfg)
    all_positions = jnp.broadcast_to(jnp.arange(ids.shape[1]), ids.shape)
    at_all = model.apply({"params": params}, ids, mask, segs, all_positions)
    at_none = model.apply({"params": params}, ids, mask, segs, None)
    return enc, at_all, at_none
  return jax.jit(run)


@pytest.mark.parametrize("scan", [False, True])
def test_outputs_match_transformers(ref, scan):
  cfg, params = hf.load_hf_bert(TINY, scan_layers=scan, deterministic=True)
  if scan:
    assert params["bert"]["encoder"]["layers"]["mlp"]["wi"]["kernel"].shape == (2, 32, 37)
  enc, at_all, at_none = _forward(cfg)(params, ref["input_ids"], ref["attention_mask"],
                                        ref["token_type_ids"])
  # Every position, padding included: HF's padded queries attend to the real keys too.
  got = {"last_hidden_state": enc["sequence_output"], "hidden_states": enc["hidden_states"],
         "pooler_output": enc["pooled_output"], "prediction_logits": at_all["mlm_logits"],
         "seq_relationship_logits": at_all["nsp_logits"]}
  for name, value in got.items():
    assert value.shape == ref[name].shape, name
    np.testing.assert_allclose(value, ref[name], atol=ATOL, rtol=0, err_msg=name)
  np.testing.assert_allclose(at_none["mlm_logits"], ref["prediction_logits"], atol=ATOL, rtol=0)
  # The fixture is not degenerate: outputs are O(1) and differ across the batch.
  assert np.abs(ref["prediction_logits"]).max() > 1
  assert np.abs(ref["pooler_output"][0] - ref["pooler_output"][1]).max() > 0.1


# ---------------------------------------------------------------------------- layouts
def test_bertmodel_checkpoint_loads_the_same_encoder(base_params):
  _, params = hf.load_hf_bert(TINY_MODEL, model="encoder")
  encoder = {k[len("bert/"):]: v for k, v in base_params.items() if k.startswith("bert/")}
  _assert_same(params, encoder)
  _, from_pretraining = hf.load_hf_bert(TINY, model="encoder")  # cls.* heads ignored
  _assert_same(from_pretraining, encoder)


def test_encoder_ignores_task_heads_but_not_stray_encoder_tensors(tmp_path):
  tensors = load_file(os.path.join(TINY_MODEL, "model.safetensors"))
  tensors["classifier.weight"] = np.zeros((3, 32), np.float32)  # a fine-tuned classifier
  _, params = hf.load_hf_bert(_checkpoint(tmp_path / "a", tensors), model="encoder")
  assert sorted(params) == ["embeddings", "encoder", "pooler"]
  tensors["encoder.layer.2.output.dense.bias"] = np.zeros(32, np.float32)
  with pytest.raises(ValueError, match="unexpected: bert.encoder.layer.2.output.dense.bias"):
    hf.load_hf_bert(_checkpoint(tmp_path / "b", tensors), model="encoder")


def test_transformers_5_checkpoint_loads_the_same_params(base_params):
  assert json.load(open(os.path.join(TINY_V5, "config.json")))["transformers_version"][0] == "5"
  _assert_same(hf.load_hf_bert(TINY_V5)[1], base_params)


def test_gamma_beta_names_and_tied_decoder_load_the_same_params(tmp_path, base_params):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                      "LayerNorm.beta"): v
             for k, v in tensors.items()}
  assert sum(k.endswith("LayerNorm.gamma") for k in renamed) == 6
  renamed["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"]
  renamed["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
  renamed["bert.embeddings.position_ids"] = np.arange(64)[None]  # an old buffer
  _assert_same(hf.load_hf_bert(_checkpoint(tmp_path, renamed))[1], base_params)


def test_untied_decoder_is_an_error(tmp_path):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  tensors["cls.predictions.decoder.weight"] = (
      tensors["bert.embeddings.word_embeddings.weight"] + 1.0)
  path = _checkpoint(tmp_path, tensors)
  with pytest.raises(ValueError, match="cls.predictions.decoder.weight differs"):
    hf.load_hf_bert(path)
  hf.load_hf_bert(path, model="encoder")  # the encoder alone is fine


def test_missing_heads_error_or_fresh_init(caplog):
  with pytest.raises(ValueError) as err:
    hf.load_hf_bert(TINY_MODEL)
  assert "missing: cls.predictions.transform.dense.weight" in str(err.value)
  assert "allow_missing_heads=True" in str(err.value)
  with caplog.at_level(logging.WARNING):
    _, params = hf.load_hf_bert(TINY_MODEL, allow_missing_heads=True)
  assert "mlm_head/nsp_head: 7 tensors freshly initialized" in caplog.text
  assert params["mlm_head"]["transform"]["kernel"].shape == (32, 32)
  assert np.std(params["nsp_head"]["kernel"]) > 0.01  # initialized, not zeros


@pytest.mark.parametrize("edit,needles", [
    ("missing", ["missing: bert.encoder.layer.1.output.dense.bias"]),
    ("extra", ["unexpected: classifier.weight"]),
    ("shape", ["mis-shaped: bert.encoder.layer.0.attention.self.key.weight: (32, 31) "
               "(expected (32, 32))"]),
    ("all", ["missing: bert.encoder.layer.1.output.dense.bias", "unexpected: classifier.weight",
             "mis-shaped: bert.encoder.layer.0.attention.self.key.weight"])])
def test_mismatched_checkpoint_names_the_tensors(tmp_path, edit, needles):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  if edit in ("missing", "all"):
    del tensors["bert.encoder.layer.1.output.dense.bias"]
  if edit in ("extra", "all"):
    tensors["classifier.weight"] = np.zeros((2, 32), np.float32)
  if edit in ("shape", "all"):
    key = "bert.encoder.layer.0.attention.self.key.weight"
    tensors[key] = tensors[key][:, :31].copy()
  with pytest.raises(ValueError) as err:
    hf.load_hf_bert(_checkpoint(tmp_path, tensors))
  for needle in needles:
    assert needle in str(err.value)


def test_torch_pickle_only_is_a_clear_error(tmp_path):
  shutil.copy(os.path.join(TINY, "config.json"), tmp_path / "config.json")
  (tmp_path / "pytorch_model.bin").write_bytes(b"\x80")
  with pytest.raises(ValueError, match="only safetensors checkpoints are supported"):
    hf.load_hf_bert(str(tmp_path))


def test_sharded_checkpoint(tmp_path, base_params):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  names = sorted(tensors)
  shards = {"model-00001-of-00002.safetensors": names[:20],
            "model-00002-of-00002.safetensors": names[20:]}
  for shard, keys in shards.items():
    save_file({k: tensors[k] for k in keys}, str(tmp_path / shard), metadata={"format": "pt"})
  index = {"weight_map": {k: s for s, keys in shards.items() for k in keys}}
  (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
  shutil.copy(os.path.join(TINY, "config.json"), tmp_path / "config.json")
  _assert_same(hf.load_hf_bert(str(tmp_path))[1], base_params)


# ---------------------------------------------------------------------------- saving
@pytest.mark.parametrize("scan", [False, True])
def test_save_load_round_trip_is_exact(tmp_path, base_params, scan):
  cfg, params = hf.load_hf_bert(TINY, scan_layers=scan)
  boxed = {"params": params}  # a full variables dict is accepted too
  hf.save_hf_bert(str(tmp_path), cfg, boxed, tokenizer_or_vocab=os.path.join(TINY, "vocab.txt"))
  _assert_same(hf.load_hf_bert(str(tmp_path))[1], base_params)
  # Tensor for tensor what transformers wrote, under the same names.
  saved = load_file(str(tmp_path / "model.safetensors"))
  original = load_file(os.path.join(TINY, "model.safetensors"))
  assert sorted(saved) == sorted(original)
  for k in original:
    np.testing.assert_array_equal(saved[k], original[k], err_msg=k)
  config = json.load(open(tmp_path / "config.json"))
  assert config["architectures"] == ["BertForPreTraining"] and config["model_type"] == "bert"
  assert hf.load_hf_config(str(tmp_path)) == cfg.replace(scan_layers=False)
  assert (tmp_path / "vocab.txt").read_text() == open(os.path.join(TINY, "vocab.txt")).read()


def test_save_encoder_tree_as_bertmodel(tmp_path):
  cfg, params = hf.load_hf_bert(TINY_MODEL, model="encoder")
  hf.save_hf_bert(str(tmp_path), cfg, jax.tree_util.tree_map(jnp.asarray, params))
  saved = load_file(str(tmp_path / "model.safetensors"))
  original = load_file(os.path.join(TINY_MODEL, "model.safetensors"))
  assert sorted(saved) == sorted(original)
  assert json.load(open(tmp_path / "config.json"))["architectures"] == ["BertModel"]


def test_save_with_tokenizer_writes_vocab_and_json(tmp_path):
  from bert_jax.data.tokenizer import load_tokenizer
  tok = load_tokenizer(os.path.join(TINY, "vocab.txt"))
  cfg, params = hf.load_hf_bert(TINY)
  hf.save_hf_bert(str(tmp_path), cfg, params, tokenizer_or_vocab=tok)
  assert (tmp_path / "vocab.txt").read_text() == open(os.path.join(TINY, "vocab.txt")).read()
  assert json.load(open(tmp_path / "tokenizer_config.json"))["do_lower_case"] is True
  from bert_jax import pretrained
  _, _, loaded = pretrained.load_encoder(str(tmp_path))
  assert loaded.encode("the cat sat").ids == tok.encode("the cat sat").ids == [2, 75, 77, 79, 3]


def test_save_rejects_models_hf_bert_cannot_express(tmp_path):
  cfg, params = hf.load_hf_bert(TINY)
  with pytest.raises(ValueError, match="pre_ln"):
    hf.save_hf_bert(str(tmp_path / "a"), cfg.replace(pre_ln=True), params)
  with pytest.raises(ValueError, match="mis-shaped.*token_embedder"):
    hf.save_hf_bert(str(tmp_path / "b"), cfg.replace(vocab_size=100), params)
  assert not os.listdir(tmp_path)  # nothing half-written


def test_save_head_models_check_head_pooler_and_labels(tmp_path):
  """Fine-tuned trees (the names of transformers' heads: tests/test_export.py checks the
  logits) are refused when transformers' class could not load them as they are."""
  cfg, encoder = hf.load_hf_bert(TINY, model="encoder")
  classifier = {"kernel": np.ones((32, 3), np.float32), "bias": np.zeros(3, np.float32)}
  tree = {"bert": encoder, "classifier": classifier}
  hf.save_hf_bert(str(tmp_path / "ok"), cfg, tree, model="sequence_classification",
                  labels=["a", "b", "c"])
  saved = load_file(str(tmp_path / "ok" / "model.safetensors"))
  assert saved["classifier.weight"].shape == (3, 32) and "bert.pooler.dense.weight" in saved
  # Mean pooling: no pooler in our tree, while BertForSequenceClassification has one.
  no_pooler = {"bert": {k: v for k, v in encoder.items() if k != "pooler"},
               "classifier": classifier}
  with pytest.raises(ValueError, match="missing.*bert/pooler/kernel"):
    hf.save_hf_bert(str(tmp_path / "a"), cfg, no_pooler, model="sequence_classification",
                    labels=["a", "b", "c"])
  # Token classification has no pooler in transformers: ours must not have one either.
  with pytest.raises(ValueError, match="unexpected.*bert/pooler/kernel"):
    hf.save_hf_bert(str(tmp_path / "b"), cfg, tree, model="token_classification",
                    labels=["a", "b", "c"])
  with pytest.raises(ValueError, match=r"3 outputs but the label list is \['a', 'b'\]"):
    hf.save_hf_bert(str(tmp_path / "c"), cfg, tree, model="sequence_classification",
                    labels=["a", "b"])
  with pytest.raises(ValueError, match="duplicate names"):
    hf.save_hf_bert(str(tmp_path / "d"), cfg, tree, model="sequence_classification",
                    labels=["a", "b", "a"])
  assert sorted(os.listdir(tmp_path)) == ["ok"]  # nothing half-written
  # The name table holds exactly the params of each head module (else a RuntimeError).
  shapes = {m: hf_layout.expected_shapes(cfg, m, 5) for m in hf_layout.HEAD_MODELS}
  assert shapes["token_classification"]["classifier/kernel"] == (32, 5)
  assert shapes["question_answering"]["qa_outputs/kernel"] == (32, 2)
  assert "bert/pooler/kernel" not in shapes["question_answering"]
