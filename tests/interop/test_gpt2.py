"""GPT-2 interop against transformers' GPT2LMHeadModel (fixture by scripts/make_hf_fixtures.py)."""
import json
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_jax.interop import gpt2
from bert_jax.decoding import gpt_generate
from bert_jax.models.gpt import GPT

HF = pathlib.Path(__file__).resolve().parents[1] / "testdata" / "hf"
TINY = str(HF / "tiny_gpt2")


@pytest.fixture(scope="module")
def ref():
  return dict(np.load(HF / "tiny_gpt2_outputs.npz"))


@pytest.fixture(scope="module")
def loaded():
  return gpt2.load_gpt2(TINY)


def test_config_maps_gpt2_fields(loaded):
  cfg, _ = loaded
  assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads) == (320, 32, 2, 4)
  assert (cfg.d_mlp, cfg.max_len, cfg.layer_norm_eps) == (128, 48, 1e-5)
  assert cfg.activation == "gelu_tanh" and cfg.pre_ln and cfg.position == "learned"


def test_logits_equal_transformers_on_a_padded_batch(loaded, ref):
  cfg, params = loaded
  model = GPT(cfg.replace(deterministic=True))
  logits = model.apply({"params": params}, jnp.asarray(ref["input_ids"], jnp.int32),
                       input_mask=jnp.asarray(ref["attention_mask"]))
  real = ref["attention_mask"].astype(bool)              # padded positions are not defined
  np.testing.assert_allclose(np.asarray(logits)[real], ref["logits"][real], atol=1e-4, rtol=0)
  assert np.abs(ref["logits"][real]).max() > 1.0         # far from a trivial output


def _generate(cfg, params, prompts, lengths, steps, **kw):
  return np.asarray(gpt_generate(GPT(cfg), params, jnp.asarray(prompts, jnp.int32),
                                 jnp.asarray(lengths, jnp.int32), max_new_tokens=steps, **kw))


def test_greedy_generation_equals_transformers_token_for_token(loaded, ref):
  cfg, params = loaded
  prompts = ref["prompts"]
  steps = ref["greedy"].shape[1] - prompts.shape[1]
  lengths = np.full(len(prompts), prompts.shape[1])
  out = _generate(cfg, params, prompts, lengths, steps, temperature=0.0)
  np.testing.assert_array_equal(out, ref["greedy"][:, prompts.shape[1]:])
  # top-k 1 is greedy whatever the temperature and seed.
  top1 = _generate(cfg, params, prompts, lengths, steps, temperature=1.3, top_k=1,
                   rng=jax.random.key(7))
  np.testing.assert_array_equal(top1, out)


def test_batched_prompts_of_different_lengths_continue_as_one_at_a_time(loaded, ref):
  cfg, params = loaded
  rows = [ref["prompts"][0][:6].tolist(), ref["prompts"][1][:2].tolist(), [5, 9, 17, 30]]
  batch = np.zeros((3, 6), np.int32)
  for i, r in enumerate(rows):
    batch[i, :len(r)] = r
  together = _generate(cfg, params, batch, [len(r) for r in rows], 12, temperature=0.0)
  for i, r in enumerate(rows):
    alone = _generate(cfg, params, np.asarray([r]), [len(r)], 12, temperature=0.0)
    np.testing.assert_array_equal(together[i], alone[0])


def test_scanned_layers_load_to_the_same_logits(loaded, ref):
  cfg, params = loaded
  scfg, sparams = gpt2.load_gpt2(TINY, scan_layers=True)
  ids = jnp.asarray(ref["input_ids"][:1], jnp.int32)
  a = GPT(cfg.replace(deterministic=True)).apply({"params": params}, ids)
  b = GPT(scfg.replace(deterministic=True)).apply({"params": sparams}, ids)
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_save_load_round_trip_is_exact(loaded, tmp_path):
  cfg, params = loaded
  tok = gpt2.load_gpt2_tokenizer(TINY)
  gpt2.save_gpt2(str(tmp_path), cfg, params, tokenizer=tok)
  cfg2, params2 = gpt2.load_gpt2(str(tmp_path))
  assert cfg2 == cfg
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, params2)
  # Same tensors, names and Conv1D layout as transformers' own file (with its prefix).
  theirs, ours = load_file(os.path.join(TINY, "model.safetensors")), load_file(
      str(tmp_path / "model.safetensors"))
  assert set(ours) == {k for k in theirs if k != "lm_head.weight"}
  for k in ours:
    np.testing.assert_array_equal(ours[k], theirs[k])
  assert gpt2.load_gpt2_tokenizer(str(tmp_path)).encode("The cat").ids == tok.encode(
      "The cat").ids


def test_tokenizer_from_vocab_and_merges_is_byte_level(ref):
  tok = gpt2.load_gpt2_tokenizer(TINY)
  assert tok.encode("The cat sat on the mat").ids[:6] == ref["prompts"][0].tolist()
  text = "naïve ünïcode ✓ never unknown"
  assert tok.decode(tok.encode(text).ids) == text       # every byte is a token


def test_gpt2model_names_and_mask_buffers_load(tmp_path, loaded):
  """The original openai-community/gpt2 layout: no `transformer.` prefix, attn.bias buffers."""
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  renamed = {k.replace("transformer.", ""): v for k, v in tensors.items() if k != "lm_head.weight"}
  renamed["h.0.attn.bias"] = np.tril(np.ones((1, 1, 48, 48), np.float32))
  save_file(renamed, str(tmp_path / "model.safetensors"))
  shutil.copy(os.path.join(TINY, "config.json"), tmp_path)
  _, params = gpt2.load_gpt2(str(tmp_path))
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, loaded[1])


def _broken_copy(tmp_path, edit_tensors=None, edit_config=None):
  tmp_path.mkdir()
  tensors = load_file(os.path.join(TINY, "model.safetensors"))
  with open(os.path.join(TINY, "config.json")) as f:
    config = json.load(f)
  if edit_tensors:
    edit_tensors(tensors)
  if edit_config:
    edit_config(config)
  save_file(tensors, str(tmp_path / "model.safetensors"))
  with open(tmp_path / "config.json", "w") as f:
    json.dump(config, f)
  return str(tmp_path)


def test_non_gpt2_and_mismatched_checkpoints_are_clear_errors(tmp_path):
  with pytest.raises(ValueError, match="model_type 'bert' is not 'gpt2'"):
    gpt2.load_gpt2(str(HF / "tiny_bert"))
  with pytest.raises(ValueError, match="tensor shapes disagree"):
    gpt2.load_gpt2(_broken_copy(tmp_path / "a", edit_config=lambda c: c.update(n_inner=64)))
  with pytest.raises(ValueError, match=r"missing \['h.1.ln_2.bias'\]"):
    gpt2.load_gpt2(_broken_copy(tmp_path / "b",
                                edit_tensors=lambda t: t.pop("transformer.h.1.ln_2.bias")))
  def untie(t):
    t["lm_head.weight"] = t["transformer.wte.weight"] + 1
  with pytest.raises(ValueError, match="untied"):
    gpt2.load_gpt2(_broken_copy(tmp_path / "c", edit_tensors=untie))
  with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
    gpt2.load_gpt2(_broken_copy(tmp_path / "d", edit_config=lambda c: c.update(
        scale_attn_by_inverse_layer_idx=True)))


def test_unknown_tokenizer_file_is_a_clear_error(tmp_path):
  bad = tmp_path / "spm.model"
  bad.write_bytes(b"\x00\x01")
  with pytest.raises(ValueError, match="unknown tokenizer file"):
    gpt2.load_gpt2_tokenizer(str(bad))
  with pytest.raises(FileNotFoundError, match="No GPT-2 tokenizer"):
    gpt2.load_gpt2_tokenizer(str(tmp_path))
