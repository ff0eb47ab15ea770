"""transformers ModernBERT directories -> our ModernBERT, against transformers' own outputs
(fixtures of scripts/make_modernbert_fixtures.py; no torch here). Export: test_modernbert_save.py.

The batch has rows of 40, 27 and 9 tokens padded to 40: longer than the local layers'
window (8 each side), so layers 1 and 2 see a band and layers 0 and 3 the whole row.
Hidden states and token logits are compared at the real positions only.
"""
import json
import os
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import bert_jax
from bert_jax.checkpoint import pretrained
from bert_jax.inference.inputs import bert_inputs
from bert_jax.interop import hf_load
from bert_jax.interop import modernbert
from bert_jax.models import modernbert as models
from tests.interop.hf_cases import assert_same
from tests.interop.modernbert_cases import BIAS, OUTPUTS, TINY, TINY_BF16

# float32 on both sides; transformers' eager attention and ours differ only in rounding
# (measured: a few 1e-6).
TOL = 1e-4


@pytest.fixture(scope="module")
def ref():
  return dict(np.load(OUTPUTS))


def _error(name, got, want, real=None):
  diff = np.abs(np.asarray(got, np.float64) - want)
  err = float((diff[real] if real is not None else diff).max())
  assert err < TOL, f"{name}: max abs error {err:.2e} (tolerance {TOL})"
  return err


def _apply(module, params, ids, mask):
  with jax.default_matmul_precision("float32"):
    return jax.jit(lambda p: module.apply({"params": p}, ids, mask))(params)


def _dir(tmp_path, name, tensors, config_from=TINY, **config_changes):
  """A checkpoint dir holding `tensors` and config_from's config.json (with changes)."""
  out = tmp_path / name
  out.mkdir(parents=True)
  config = json.load(open(os.path.join(config_from, "config.json")))
  (out / "config.json").write_text(json.dumps(dict(config, **config_changes)))
  if tensors is not None:
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
  return str(out)


def _tensors(path=TINY):
  return load_file(os.path.join(path, "model.safetensors"))


# ---------------------------------------------------------------------------- numerics
@pytest.mark.parametrize("name, path", [("tiny", TINY), ("bf16", TINY_BF16)])
def test_masked_lm_matches_transformers(ref, name, path):
  """bf16: the file holds bfloat16 weights, read exactly into float32; transformers' values
  are its float32 run on the same rounded weights, so the tolerance is float32's."""
  cfg, params = modernbert.load_modernbert(path, deterministic=True)
  assert cfg.family == "modernbert" and [i for i in range(4) if i % cfg.global_every] == [1, 2]
  stored = {v.dtype.name for v in hf_load.read_safetensors(path).values()}
  assert stored == {"bfloat16" if name == "bf16" else "float32"}
  assert {v.dtype.name for v in jax.tree_util.tree_leaves(params)} == {"float32"}
  ids, mask = ref["input_ids"], ref["attention_mask"]
  real = mask.astype(bool)
  logits = _apply(models.ModernBertForMaskedLM(cfg), params, ids, mask)["mlm_logits"]
  hidden = _apply(models.ModernBertModel(cfg), params["model"], ids, mask)["sequence_output"]
  errors = (_error(f"{name} last_hidden_state", hidden, ref[f"{name}/last_hidden_state"], real),
            _error(f"{name} mlm_logits", logits, ref[f"{name}/mlm_logits"], real))
  print(f"{name}: max abs error hidden {errors[0]:.2e}, MLM logits {errors[1]:.2e}")
  assert np.abs(ref[f"{name}/mlm_logits"]).max() > 1  # not a degenerate fixture


def test_classifiers_match_transformers(ref):
  """Every bias on, gelu_pytorch_tanh; one file read as both classifiers (same tensors)."""
  cfg, seq = modernbert.load_modernbert(BIAS, model="sequence_classification",
                                        deterministic=True)
  assert (cfg.pooling, cfg.activation) == ("mean", "gelu_tanh")
  assert cfg.norm_bias and cfg.use_bias and cfg.mlp_bias and cfg.head_bias
  _, tok = modernbert.load_modernbert(BIAS, model="token_classification")
  assert_same(seq, tok)
  ids, mask = ref["input_ids"], ref["attention_mask"]
  real = mask.astype(bool)
  errors = {}
  for pooling in ("mean", "cls"):
    got = _apply(models.ModernBertForSequenceClassification(cfg.replace(pooling=pooling), 3),
                 seq, ids, mask)["logits"]
    errors[pooling] = _error(f"seq {pooling}", got, ref[f"bias/seq_logits_{pooling}"])
  got = _apply(models.ModernBertForTokenClassification(cfg, 3), tok, ids, mask)["logits"]
  errors["token"] = _error("token", got, ref["bias/token_logits"], real)
  hidden = _apply(models.ModernBertModel(cfg), seq["model"], ids, mask)["sequence_output"]
  errors["hidden"] = _error("hidden", hidden, ref["bias/last_hidden_state"], real)
  print("bias: max abs errors", {k: f"{v:.2e}" for k, v in errors.items()})
  assert np.abs(ref["bias/seq_logits_mean"] - ref["bias/seq_logits_cls"]).max() > 0.1


# ----------------------------------------------------------------------- config, names
def test_config_json_fields():
  cfg = modernbert.load_modernbert_config(TINY)
  assert (cfg.vocab_size, cfg.hidden_size, cfg.mlp_dim, cfg.num_layers, cfg.num_heads,
          cfg.max_len) == (128, 32, 48, 4, 4, 64)
  assert (cfg.local_window, cfg.global_every, cfg.rotary_base,
          cfg.local_rotary_base) == (16, 3, 160000.0, 10000.0)
  assert (cfg.norm_bias, cfg.use_bias, cfg.mlp_bias, cfg.head_bias,
          cfg.decoder_bias) == (False, False, False, False, True)
  assert (cfg.activation, cfg.pooling, cfg.layer_norm_eps, cfg.type_vocab_size,
          cfg.position, cfg.pre_ln) == ("gelu", "cls", 1e-5, 0, "rotary", True)
  assert (cfg.dropout_rate, cfg.attention_dropout_rate) == (0.0, 0.0)


def test_null_local_theta_is_the_global_one(tmp_path):
  path = _dir(tmp_path, "c", None, local_rope_theta=None, mlp_dropout=0.1)
  cfg = modernbert.load_modernbert_config(path)
  assert cfg.local_rotary_base == 160000.0 and cfg.dropout_rate == 0.1


def test_a_bare_modernbertmodel_checkpoint_and_fresh_heads(tmp_path):
  tensors = _tensors()
  bare = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
  path = _dir(tmp_path, "bare", bare)
  _, encoder = modernbert.load_modernbert(path, model="encoder")
  assert_same(encoder, modernbert.load_modernbert(TINY, model="encoder")[1])  # heads ignored
  with pytest.raises(ValueError, match=r"missing decoder\.bias, head\.dense\.weight, "
                                       r"head\.norm\.weight; only the MLM head: "
                                       r"allow_missing_heads=True makes a fresh one$"):
    modernbert.load_modernbert(path)
  _, fresh = modernbert.load_modernbert(path, allow_missing_heads=True)
  assert_same(fresh["model"], encoder)
  np.testing.assert_array_equal(fresh["decoder_bias"], np.zeros(128, np.float32))
  np.testing.assert_array_equal(fresh["head"]["norm"]["scale"], np.ones(32, np.float32))
  assert 0.01 < fresh["head"]["dense"]["kernel"].std() < 0.03         # init_std 0.02
  _, dropped = modernbert.load_modernbert(path, drop_missing_heads=True)
  assert sorted(dropped) == ["model"]


def test_the_tied_decoder_weight(tmp_path):
  tensors = _tensors()
  table = tensors["model.embeddings.tok_embeddings.weight"]
  path = _dir(tmp_path, "tied", dict(tensors, **{"decoder.weight": table}))
  assert_same(modernbert.load_modernbert(path)[1], modernbert.load_modernbert(TINY)[1])
  path = _dir(tmp_path, "untied", dict(tensors, **{"decoder.weight": table + 1}))
  with pytest.raises(ValueError, match="decoder.weight differs from the token embeddings"):
    modernbert.load_modernbert(path)


def test_the_kernel_layouts():
  """Wqkv rows are q, k, v then heads; Wo's inputs are heads x head_dim; Wi's rows are the
  input half, then the gate."""
  tensors, (_, params) = _tensors(), modernbert.load_modernbert(TINY)
  layer = params["model"]["layers_1"]
  wqkv = tensors["model.layers.1.attn.Wqkv.weight"]                # [3 * 4 * 8, 32]
  np.testing.assert_array_equal(layer["attn"]["Wqkv"]["kernel"][:, 1, 2, 5],
                                wqkv[1 * 32 + 2 * 8 + 5])           # key, head 2, dim 5
  np.testing.assert_array_equal(layer["attn"]["Wo"]["kernel"][3, 7],
                                tensors["model.layers.1.attn.Wo.weight"][:, 3 * 8 + 7])
  np.testing.assert_array_equal(layer["mlp"]["Wi"]["kernel"][:, 1, 0],
                                tensors["model.layers.1.mlp.Wi.weight"][48])  # gate row 0


# --------------------------------------------------------------------------- bad input
def _one_line(excinfo):
  assert "\n" not in str(excinfo.value), str(excinfo.value)


def test_missing_safetensors_is_one_line(tmp_path):
  path = _dir(tmp_path, "empty", None)
  with pytest.raises(FileNotFoundError, match="No model.safetensors in") as e:
    modernbert.load_modernbert(path)
  _one_line(e)
  with pytest.raises(ValueError, match=r"cannot load .*: No model.safetensors in") as e:
    bert_jax.load(path)
  _one_line(e)


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_activation="silu"), "hidden_activation 'silu' is not supported"),
    (dict(classifier_activation="relu"), "classifier_activation 'relu' differs from "
                                         "hidden_activation 'gelu'"),
    (dict(num_hidden_layers="4"), "num_hidden_layers must be a positive integer"),
    (dict(num_attention_heads=5), "hidden_size 32 is not divisible by num_heads 5"),
    (dict(classifier_pooling="max"), "classifier_pooling 'max'"),
])
def test_unsupported_config_is_one_line(tmp_path, changes, message):
  path = _dir(tmp_path, "c", None, **changes)
  with pytest.raises(ValueError, match=message) as e:
    modernbert.load_modernbert_config(path)
  _one_line(e)


def test_mis_shaped_and_stray_tensors_are_one_line(tmp_path):
  tensors = _tensors()
  tensors["model.layers.1.attn.Wqkv.weight"] = tensors["model.layers.1.attn.Wqkv.weight"][:90]
  tensors["model.layers.4.mlp.Wo.weight"] = np.zeros((32, 48), np.float32)
  with pytest.raises(ValueError, match=r"unexpected model\.layers\.4\.mlp\.Wo\.weight; "
                     r"mis-shaped model\.layers\.1\.attn\.Wqkv\.weight \(90, 32\) "
                     r"\(expected \(96, 32\)\)") as e:
    modernbert.load_modernbert(_dir(tmp_path, "bad", tensors))
  _one_line(e)


def test_tokenizer_problems_are_one_line(tmp_path):
  path = _dir(tmp_path, "tok", None)
  with pytest.raises(FileNotFoundError, match="No tokenizer.json in"):
    modernbert.load_tokenizer(path)
  (tmp_path / "tok" / "tokenizer.json").write_text("{not json")
  with pytest.raises(ValueError, match="is not a readable tokenizer.json") as e:
    modernbert.load_tokenizer(path)
  _one_line(e)
  shutil.copy(os.path.join(TINY, "tokenizer.json"), tmp_path / "tok")
  (tmp_path / "tok" / "config.json").write_text(json.dumps({"cls_token_id": 7}))
  with pytest.raises(ValueError, match=r"\[CLS\] is id 1 but config.json's cls_token_id is 7"):
    modernbert.load_tokenizer(path)


# ---------------------------------------------------------------- inference, init_from
def test_bert_jax_load_encode_and_fill_mask(ref):
  model = bert_jax.load(TINY)
  assert model.config.family == "modernbert" and model.has_mlm_head
  assert isinstance(model.module, models.ModernBertModel)
  assert model.tokenizer.encode(str(ref["text"])).ids == ref["text_ids"].tolist()  # BPE
  vectors = model.encode([str(t) for t in ref["encode_texts"]])   # mean of [CLS] .. [SEP]
  err = _error("encode mean", vectors, ref["encode_mean"])
  ids, _, _ = bert_inputs(model.tokenizer, str(ref["fill_text"]))  # as fill_mask has it
  assert ids == ref["fill_ids"].tolist()
  best = model.fill_mask(str(ref["fill_text"]), top_k=3)[0]
  logits = ref["fill_logits"].astype(np.float64)
  probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
  top = np.argsort(-probs)[:3]
  # Answers are decoded words, as transformers' fill-mask pipeline's token_str (stripped).
  decoded = [model.tokenizer.decode([int(i)], skip_special_tokens=False).strip() for i in top]
  assert [t for t, _ in best] == decoded and not any(t.startswith("Ġ") for t, _ in best)
  gap = max(abs(p - probs[i]) for (_, p), i in zip(best, top))
  assert gap < 1e-5, f"fill-mask probabilities: max abs error {gap:.2e}"
  print(f"encode: max abs error {err:.2e}; fill-mask probabilities {gap:.2e}")
  # Layer -1 is the output after the final norm whether or not other layers come with it.
  from bert_jax.inference import encode as encode_lib  # pylint: disable=g-import-not-at-top
  ids = [np.asarray(model.tokenizer.encode(str(t)).ids) for t in ref["encode_texts"]]
  last = encode_lib.run_model(model.config, model.params, ids, layers=(-1,))
  both = encode_lib.run_model(model.config, model.params, ids, layers=(-1, 0))
  for a, b in zip(last, both):
    np.testing.assert_allclose(b[:a.shape[-1]], a, atol=1e-6)


def test_a_classifier_dir_encodes_but_has_no_mlm_head(tmp_path):
  path = tmp_path / "cls"
  shutil.copytree(BIAS, path)
  for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(os.path.join(TINY, name), path)
  model = bert_jax.load(str(path))
  assert not model.has_mlm_head and sorted(model.params)[:2] == ["embeddings", "final_norm"]
  assert model.encode("the cat", pooling="cls").shape == (32,)
  with pytest.raises(ValueError, match="has no MLM head"):
    model.fill_mask("the [MASK]")


def test_init_from_reads_a_modernbert_dir(ref):
  cfg, params, tok = pretrained.load_encoder(TINY)
  assert cfg.family == "modernbert" and cfg.deterministic
  assert sorted(params) == ["embeddings", "final_norm"] + [f"layers_{i}" for i in range(4)]
  assert_same(params, modernbert.load_modernbert(TINY, model="encoder")[1])
  assert tok.encode(str(ref["text"])).ids == ref["text_ids"].tolist()
  cfg_only, none, _ = pretrained.load_encoder(os.path.join(TINY, "config.json"),
                                              with_params=False)
  assert cfg_only == cfg and none is None
  assert_same(pretrained.load_pretraining_params(TINY, nsp=False),
              modernbert.load_modernbert(TINY)[1])
