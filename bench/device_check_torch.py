"""PyTorch side of bench/device_check.py: transformers' BERT / GPT-2 train steps (bf16
autocast, SDPA attention, fused AdamW on CUDA) and GPT2LMHeadModel.generate, on the same
shapes. Started by device_check.py in a subprocess (so it frees the GPU before JAX takes
its memory), never by hand:

  python bench/device_check_torch.py SPEC_JSON

Prints one JSON line: {"torch": version, "device": ..., "train": {name: step_s},
"decode": {batch: tokens_per_s}}.
"""
from __future__ import annotations

import json
import sys
import time


def _timed(fn, steps: int, sync) -> float:
  """Median seconds of `steps` calls after one warm-up call."""
  fn()
  sync()
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    fn()
    sync()
    times.append(time.perf_counter() - t0)
  return sorted(times)[len(times) // 2]


def main():
  spec = json.loads(sys.argv[1])
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  cuda = torch.cuda.is_available()
  device = torch.device("cuda" if cuda else "cpu")
  sync = torch.cuda.synchronize if cuda else (lambda: None)
  torch.manual_seed(0)
  out = {"torch": torch.__version__, "transformers": transformers.__version__,
         "device": torch.cuda.get_device_name() if cuda else "cpu", "train": {}, "decode": {}}

  for case in spec["train"]:
    m = case["model"]
    if case["family"] == "bert":
      cfg = transformers.BertConfig(
          vocab_size=m["vocab_size"], hidden_size=m["hidden_size"],
          num_hidden_layers=m["num_layers"], num_attention_heads=m["num_heads"],
          intermediate_size=m["mlp_dim"], max_position_embeddings=m["max_len"],
          attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
      model = transformers.BertForPreTraining(cfg)
    elif case["family"] == "modernbert":
      cfg = transformers.ModernBertConfig(
          vocab_size=m["vocab_size"], hidden_size=m["hidden_size"],
          num_hidden_layers=m["num_layers"], num_attention_heads=m["num_heads"],
          intermediate_size=m["mlp_dim"], max_position_embeddings=m["max_len"],
          local_attention=m.get("local_window", 128), reference_compile=False,
          pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
          attn_implementation="sdpa")  # special ids inside a small test vocabulary
      model = transformers.ModernBertForMaskedLM(cfg)
    else:
      cfg = transformers.GPT2Config(
          vocab_size=m["vocab_size"], n_positions=m["max_len"], n_embd=m["hidden_size"],
          n_layer=m["num_layers"], n_head=m["num_heads"], n_inner=m["mlp_dim"], attn_pdrop=0.0,
          attn_implementation="sdpa")
      model = transformers.GPT2LMHeadModel(cfg)
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    batch = {k: torch.as_tensor(v, device=device) for k, v in case["batch"].items()}

    def step():
      opt.zero_grad(set_to_none=True)
      with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = model(**batch).loss
      loss.backward()
      opt.step()

    out["train"][case["name"]] = _timed(step, spec["steps"], sync)
    del model, opt, batch
    if cuda:
      torch.cuda.empty_cache()

  d = spec["decode"]
  model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
      vocab_size=d["vocab_size"], n_positions=d["max_len"], n_embd=d["hidden_size"],
      n_layer=d["num_layers"], n_head=d["num_heads"])).to(device).eval()
  for b in d["batches"]:
    ids = torch.randint(0, d["vocab_size"], (b, d["prompt"]), device=device)
    call = lambda ids=ids: model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=d["new"], min_new_tokens=d["new"], pad_token_id=0)
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
      out["decode"][str(b)] = b * d["new"] / _timed(call, 2, sync)
  print(json.dumps(out))


if __name__ == "__main__":
  main()
