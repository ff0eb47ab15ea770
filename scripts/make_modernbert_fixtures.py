"""Writes the ModernBERT reference fixtures under tests/testdata/hf/ (torch at build time only).

The tests never import torch or transformers: they read what this script wrote. Run from
the repo root in the reference venv (requirements-ref.txt), in two steps:

  HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_modernbert_fixtures.py --only tiny
  HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_modernbert_fixtures.py --only export

(no --only: both). 1. tiny (torch + transformers 4.57): random tiny ModernBERTs, their
tokenizer and transformers' outputs on a padded batch. 2. export: the main venv's python
(--jax_python, default .venv/bin/python) runs our exporter on those checkpoints, as
`JAX_PLATFORMS=cpu .venv/bin/python -m tests.interop.modernbert_cases DIR` (jax, no
torch), then this script loads DIR with transformers and keeps its outputs. Rerun step 2
whenever step 1 or the exporter changes (test_modernbert_save.py checks the bytes).

Outputs (tests/testdata/hf/):
  modernbert_tiny/       ModernBertForMaskedLM, no biases (transformers' default), gelu, fp32,
                         + a tiny byte-level BPE (tokenizer.json, tokenizer_config.json, ...)
  modernbert_tiny_bf16/  the same weights saved in bfloat16
  modernbert_bias/       ModernBertForSequenceClassification (3 labels, mean pooling) with
                         every bias (norm, attention, mlp, classifier), gelu_pytorch_tanh;
                         the same file loads as ModernBertForTokenClassification
  modernbert_outputs.npz the batch (lengths 40, 27, 9 padded to 40: longer than the local
                         window, 8 each side) and transformers' outputs on it; tokenizer ids
  modernbert_export.npz  transformers' outputs on our exports of those models (not kept:
                         the test writes them again and checks their sha256 against these)
All four layers of each model: 0 and 3 global (global_attn_every_n_layers 3), 1 and 2 local.
"""
import argparse
import hashlib
import json
import os
import subprocess
import tempfile

import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "testdata", "hf")
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]   # ids 0-4, ModernBERT's order
UNK, CLS, SEP, PAD, MASK = range(5)
CORPUS = [
    "The cat sat on the mat. The dog ran in the park, and the bird sang in the tree.",
    "Paris is the capital of France. Berlin is the capital of Germany.",
    "A modern encoder attends locally in most layers and globally in every third one.",
    "Rotary positions rotate queries and keys; the window keeps eight tokens each side.",
    "Hello world! Jax and Flax compile the model once, then run it fast.",
] * 3
TINY = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
            max_position_embeddings=64, global_attn_every_n_layers=3, local_attention=16,
            global_rope_theta=160000.0, local_rope_theta=10000.0, norm_eps=1e-5,
            pad_token_id=PAD, cls_token_id=CLS, sep_token_id=SEP, bos_token_id=CLS,
            eos_token_id=SEP, reference_compile=False)
BIASES = dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
              hidden_activation="gelu_pytorch_tanh", classifier_activation="gelu_pytorch_tanh",
              classifier_pooling="mean", num_labels=3)
LENGTHS, MAX_LEN = (40, 27, 9), 40
TEXT = "The cat sat on the mat, and the dog ran!"
FILL_TEXT = "Paris is the [MASK] of France."
ENCODE_TEXTS = ["The cat sat on the mat.", "Hello world!"]


def make_tokenizer():
  """A byte-level BPE of ~128 tokens (ModernBERT's kind), [CLS] $A [SEP] post-processing."""
  from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
  from tokenizers import trainers
  tok = Tokenizer(models.BPE(unk_token="[UNK]"))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  specials = SPECIALS[:-1] + [AddedToken("[MASK]", lstrip=True, special=True)]
  tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
      vocab_size=128, min_frequency=2, special_tokens=specials, show_progress=False))
  tok.post_processor = processors.TemplateProcessing(
      single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
      special_tokens=[("[CLS]", CLS), ("[SEP]", SEP)])
  assert [tok.token_to_id(t) for t in SPECIALS] == list(range(5))
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
      pad_token="[PAD]", mask_token="[MASK]", model_max_length=64,
      model_input_names=["input_ids", "attention_mask"])


def perturbed(model):
  """Every tensor far from its default init (LayerNorms 1 / biases 0 would hide a swapped
  or dropped one): LayerNorm weights 1 + N(0, 0.2), the others N(0, 0.2)."""
  torch.manual_seed(0)
  with torch.no_grad():
    for name, p in model.named_parameters():  # the tied decoder appears once
      offset = 1.0 if "norm.weight" in name else 0.0
      p.copy_(offset + 0.2 * torch.randn_like(p))
  return model.eval()


def padded_batch(vocab_size: int):
  rng = np.random.default_rng(0)
  ids = np.full((len(LENGTHS), MAX_LEN), PAD, np.int64)
  mask = np.zeros_like(ids)
  for r, n in enumerate(LENGTHS):
    body = rng.integers(5, vocab_size, size=n)
    body[0], body[n - 1] = CLS, SEP
    ids[r, :n], mask[r, :n] = body, 1
  return ids, mask


def write_tiny():
  tokenizer = make_tokenizer()
  vocab = len(tokenizer)
  config = transformers.ModernBertConfig(vocab_size=vocab, **TINY, attn_implementation="eager")
  mlm = perturbed(transformers.ModernBertForMaskedLM(config))
  tiny = os.path.join(OUT, "modernbert_tiny")
  mlm.save_pretrained(tiny, safe_serialization=True)
  tokenizer.save_pretrained(tiny)
  mlm.to(torch.bfloat16).save_pretrained(os.path.join(OUT, "modernbert_tiny_bf16"))
  biased = transformers.ModernBertConfig(vocab_size=vocab, **TINY, **BIASES,
                                         attn_implementation="eager")
  seq = perturbed(transformers.ModernBertForSequenceClassification(biased))
  seq.save_pretrained(os.path.join(OUT, "modernbert_bias"), safe_serialization=True)

  ids, mask = padded_batch(vocab)
  t = torch.from_numpy
  out = dict(input_ids=ids, attention_mask=mask)
  load = dict(attn_implementation="eager", torch_dtype=torch.float32)
  with torch.no_grad():
    # bf16: transformers run in float32 on the bf16-rounded weights, as our loader reads them
    for name, path in (("tiny", tiny), ("bf16", os.path.join(OUT, "modernbert_tiny_bf16"))):
      model = transformers.ModernBertForMaskedLM.from_pretrained(path, **load).eval()
      out[f"{name}/last_hidden_state"] = model.model(t(ids), t(mask)).last_hidden_state.numpy()
      out[f"{name}/mlm_logits"] = model(t(ids), t(mask)).logits.numpy()
    bias = os.path.join(OUT, "modernbert_bias")
    for pooling in ("mean", "cls"):
      model = transformers.ModernBertForSequenceClassification.from_pretrained(
          bias, classifier_pooling=pooling, **load).eval()
      out[f"bias/seq_logits_{pooling}"] = model(t(ids), t(mask)).logits.numpy()
    out["bias/last_hidden_state"] = model.model(t(ids), t(mask)).last_hidden_state.numpy()
    model, info = transformers.ModernBertForTokenClassification.from_pretrained(
        bias, output_loading_info=True, **load)
    assert not any(info.values()), info          # the same tensors: nothing fresh
    out["bias/token_logits"] = model.eval()(t(ids), t(mask)).logits.numpy()
    # The inference paths: a sentence's ids, fill-mask's logits, encode's mean vectors.
    hf_tok = transformers.AutoTokenizer.from_pretrained(tiny)
    out["text_ids"] = np.array(hf_tok(TEXT)["input_ids"])
    mlm = transformers.ModernBertForMaskedLM.from_pretrained(tiny, **load).eval()
    fill = hf_tok(FILL_TEXT, return_tensors="pt")
    at = int((fill["input_ids"][0] == MASK).nonzero()[0, 0])
    out["fill_ids"] = fill["input_ids"][0].numpy()
    out["fill_logits"] = mlm(**fill).logits[0, at].numpy()
    batch = hf_tok(ENCODE_TEXTS, padding=True, return_tensors="pt")
    hidden = mlm.model(**batch).last_hidden_state
    weights = batch["attention_mask"][..., None].float()
    out["encode_mean"] = ((hidden * weights).sum(1) / weights.sum(1)).numpy()
  # The window matters: a model of global layers only gives other outputs on this batch.
  config.local_attention = 2 * MAX_LEN
  wide = transformers.ModernBertForMaskedLM.from_pretrained(tiny, config=config, **load).eval()
  with torch.no_grad():
    gap = np.abs(wide(t(ids), t(mask)).logits.numpy() - out["tiny/mlm_logits"])[0].max()
  assert gap > 0.1, f"the local window changes the logits by only {gap}"
  np.savez(os.path.join(OUT, "modernbert_outputs.npz"), text=TEXT, fill_text=FILL_TEXT,
           encode_texts=np.array(ENCODE_TEXTS), **out)
  print("modernbert: vocab", vocab, "params", mlm.num_parameters(), seq.num_parameters(),
        "window gap", gap, "text ids", out["text_ids"].tolist())


# Our export of each fixture (tests/interop/modernbert_cases.EXPORTS) -> transformers class.
EXPORT_CLASSES = {"masked_lm": "ModernBertForMaskedLM",
                  "sequence_classification": "ModernBertForSequenceClassification",
                  "token_classification": "ModernBertForTokenClassification"}


def sha256(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def write_export(jax_python: str):
  """Our exporter's directories (written by the main venv), loaded and run by transformers."""
  ref = np.load(os.path.join(OUT, "modernbert_outputs.npz"))
  ids, mask = torch.from_numpy(ref["input_ids"]), torch.from_numpy(ref["attention_mask"])
  out = {}
  with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([jax_python, "-m", "tests.interop.modernbert_cases", tmp], cwd=ROOT,
                   check=True, env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"))
    for kind, cls in EXPORT_CLASSES.items():
      path = os.path.join(tmp, kind)
      with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        assert json.load(f)["architectures"] == [cls], (kind, path)
      model, info = getattr(transformers, cls).from_pretrained(
          path, output_loading_info=True, attn_implementation="eager")
      assert not any(info.values()), (kind, info)   # every tensor read, none fresh
      with torch.no_grad():
        out[f"{kind}/logits"] = model.eval()(ids, mask).logits.numpy()
      for name in ("model.safetensors", "config.json"):
        out[f"{kind}/sha256/{name}"] = np.array(sha256(os.path.join(path, name)))
      if kind == "masked_lm":  # the tokenizer files came along and load in transformers
        tok = transformers.AutoTokenizer.from_pretrained(path)
        assert tok(TEXT)["input_ids"] == ref["text_ids"].tolist()
      print(f"export/{kind}: {cls}, max |logits| {np.abs(out[f'{kind}/logits']).max():.2f}")
  np.savez(os.path.join(OUT, "modernbert_export.npz"), **out)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--only", choices=["tiny", "export"])
  parser.add_argument("--jax_python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                      help="the main venv's python (jax, flax), which writes the exports")
  args = parser.parse_args()
  if args.only in (None, "tiny"):
    write_tiny()
  if args.only in (None, "export"):
    write_export(args.jax_python)


if __name__ == "__main__":
  main()
