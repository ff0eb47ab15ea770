"""Writes the golden training trajectories under tests/testdata/golden/ (torch at build time only).

For each case of tests/train/golden_cases.py (BERT pretraining MLM + NSP, sequence
classification fine-tuning, GPT language modelling) the main venv writes our initial
weights (exported into transformers' names by bert_jax/interop), 30 batches of our data
pipeline and the config's optimizer settings; this script loads them into transformers'
model (BertForPreTraining / BertForSequenceClassification / GPT2LMHeadModel, float32,
dropout off) and trains it 30 steps with the same recipe written out in torch:
torch.optim.AdamW with the decay / no-decay parameter groups, LambdaLR for the warmup +
decay schedule, clip_grad_norm_ at 1.0, and per-layer learning rates for layer-wise
decay. It records the loss and the (pre-clip) gradient norm of every step and every
parameter after the last one. tests/train/test_golden.py replays the same batches through
our train_step (no torch in CI). Regenerate from the repo root, reference venv
(requirements-ref.txt):

  HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_golden_fixtures.py \
      [--jax_python .venv/bin/python]

Outputs (tests/testdata/golden/): <case>.npz with batch/<key> [30, B, ...],
init/<hf name>, final/<hf name>, loss [30], grad_norm [30], learning_rate [30]; and
<case>.json with the optimizer settings, the transformers config and the versions used.
"""
import argparse
import json
import math
import os
import re
import subprocess
import tempfile

import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "testdata", "golden")
CASES = ("pretraining", "classification", "lm")


# ------------------------------------------------------------------------- the recipe
def lr_lambda(train: dict):
  """The learning-rate multiplier of step t (0-based), as optim.learning_rate_schedule
  defines the schedules: linear warmup from 0, then linear decay to 0 at total_steps, or
  cosine to min_lr_fraction of the peak."""
  total = int(train["total_steps"])
  warmup = int(train["warmup_steps"] or 0)
  if train.get("warmup_fraction"):
    warmup = int(round(train["warmup_fraction"] * total))

  def factor(t):
    if t < warmup:
      return t / max(warmup, 1)
    if train["schedule"] == "linear":
      return max(0.0, (total - t) / max(total - warmup, 1))
    if train["schedule"] == "cosine":
      floor = train["min_lr_fraction"]
      progress = min(1.0, (t - warmup) / max(total - warmup, 1))
      return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    raise ValueError(f"schedule {train['schedule']!r} is not reproduced here")
  return factor


def decays(name: str, param: torch.Tensor, train: dict) -> bool:
  """Weight decay on weight matrices, not on biases or LayerNorm weights (the BERT /
  transformers Trainer convention: no_decay = bias, LayerNorm.weight); embedding tables
  only when the config decays them (GPT: decay_embeddings=False)."""
  if name.endswith("bias") or "LayerNorm" in name or re.search(r"\bln_", name):
    return False
  if not train["decay_embeddings"] and ("wte" in name or "wpe" in name
                                        or "embeddings" in name):
    return False
  assert param.dim() >= 2, name
  return True


def layer_factor(name: str, train: dict, num_layers: int) -> float:
  """Layer-wise learning-rate decay (Clark et al. 2020): the classifier 1, the pooler d,
  encoder layer i d^(L - i), the embeddings d^(L + 1)."""
  d = train["layerwise_lr_decay"]
  if d == 1.0:
    return 1.0
  if ".embeddings." in name:
    return d ** (num_layers + 1)
  m = re.search(r"\.layer\.(\d+)\.", name)
  if m:
    return d ** (num_layers - int(m.group(1)))
  return d if ".pooler." in name else 1.0


def make_optimizer(model: torch.nn.Module, train: dict, num_layers: int):
  assert train["optimizer"] == "adamw", train["optimizer"]
  groups = []
  for name, p in model.named_parameters():     # a tied weight appears once
    groups.append({"params": [p], "name": name,
                   "lr": train["learning_rate"] * layer_factor(name, train, num_layers),
                   "weight_decay": train["weight_decay"] if decays(name, p, train) else 0.0})
  opt = torch.optim.AdamW(groups, lr=train["learning_rate"],
                          betas=(train["b1"], train["b2"]), eps=train["eps"])
  return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(train))


# ------------------------------------------------------------------------- the models
def build_model(meta: dict, init: dict) -> torch.nn.Module:
  cls = getattr(transformers, meta["hf_class"])
  fields = {k: v for k, v in meta["hf_config"].items() if k not in ("architectures",
                                                                    "torch_dtype")}
  config_cls = transformers.GPT2Config if meta["case"] == "lm" else transformers.BertConfig
  config = config_cls(**fields)
  config._attn_implementation = "eager"  # pylint: disable=protected-access
  torch.manual_seed(0)
  model = cls(config).float()
  state = {k: torch.from_numpy(np.array(v)) for k, v in init.items()}
  missing, unexpected = model.load_state_dict(state, strict=False)
  tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "lm_head.weight"}
  assert not unexpected, unexpected
  assert set(missing) <= tied, missing
  model.tie_weights()
  model.train()  # dropout is 0 everywhere (the configs' dropout rates are 0)
  for name, module in model.named_modules():
    if isinstance(module, torch.nn.Dropout):
      assert module.p == 0.0, name
  return model


def mlm_labels(batch: dict) -> torch.Tensor:
  """Sparse masked positions -> transformers' dense labels (-100 = not predicted)."""
  ids = batch["input_ids"]
  labels = np.full(ids.shape, -100, np.int64)
  for r in range(ids.shape[0]):
    for pos, tok, w in zip(batch["masked_lm_positions"][r], batch["masked_lm_ids"][r],
                           batch["masked_lm_weights"][r]):
      if w > 0:
        assert labels[r, pos] == -100, "a position masked twice"
        labels[r, pos] = tok
  return torch.from_numpy(labels)


def packed_causal_mask(segment_ids: np.ndarray) -> torch.Tensor:
  """[B, L] document numbers -> additive [B, 1, L, L]: causal and within one document."""
  seg = torch.from_numpy(segment_ids.astype(np.int64))
  same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] > 0)
  length = seg.shape[1]
  causal = torch.tril(torch.ones(length, length, dtype=torch.bool))
  allowed = same & causal
  neg = torch.finfo(torch.float32).min
  return torch.where(allowed, 0.0, neg)[:, None].float()


def loss_of(model, case: str, batch: dict) -> torch.Tensor:
  t = lambda k: torch.from_numpy(np.asarray(batch[k]).astype(np.int64))
  if case == "pretraining":
    assert np.all(batch["next_sentence_weights"] == 1)
    out = model(input_ids=t("input_ids"), attention_mask=t("input_mask"),
                token_type_ids=t("segment_ids"), labels=mlm_labels(batch),
                next_sentence_label=t("next_sentence_labels"))
    return out.loss                 # mean MLM CE over masked positions + mean NSP CE
  if case == "classification":
    assert np.all(batch["example_weight"] == 1)
    out = model(input_ids=t("input_ids"), attention_mask=t("input_mask"),
                token_type_ids=t("segment_ids"), labels=t("labels"))
    return out.loss                 # mean CE over the rows
  # GPT: our rows carry their own targets (the stream's next token, the one after the
  # row's end included), so the loss is the weighted mean CE on them rather than
  # transformers' shift of input_ids inside the row.
  logits = model(input_ids=t("input_ids"), position_ids=t("positions"),
                 attention_mask=packed_causal_mask(batch["segment_ids"])).logits
  w = torch.from_numpy(np.asarray(batch["weights"], np.float32))
  ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                         t("targets").reshape(-1), reduction="none")
  return (ce * w.reshape(-1)).sum() / w.sum()


def train(case: str, meta: dict, arrays: dict) -> dict:
  init = {k[len("init/"):]: v for k, v in arrays.items() if k.startswith("init/")}
  batches = {k[len("batch/"):]: v for k, v in arrays.items() if k.startswith("batch/")}
  model = build_model(meta, init)
  cfg = meta["hf_config"]
  num_layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
  opt, sched = make_optimizer(model, meta["train"], num_layers)
  params = [p for _, p in model.named_parameters()]
  losses, norms, lrs = [], [], []
  for step in range(meta["steps"]):
    batch = {k: v[step] for k, v in batches.items()}
    opt.zero_grad(set_to_none=True)
    loss = loss_of(model, case, batch)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, meta["train"]["grad_clip_norm"])
    lrs.append(sched.get_last_lr()[0] / layer_factor(opt.param_groups[0]["name"],
                                                     meta["train"], num_layers))
    opt.step()
    sched.step()
    losses.append(loss.item())
    norms.append(norm.item())
  state = model.state_dict()
  final = {k: state[k].detach().numpy().copy() for k in init}
  print(f"{case}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, grad norm {norms[0]:.3f} -> "
        f"{norms[-1]:.3f}")
  return {"loss": np.array(losses, np.float64), "grad_norm": np.array(norms, np.float64),
          "learning_rate": np.array(lrs, np.float64),
          **{f"final/{k}": v for k, v in final.items()}}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--jax_python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                      help="the main venv's python (jax), which writes the inputs")
  parser.add_argument("--inputs", default="",
                      help="a directory the main venv already wrote (skips that step)")
  args = parser.parse_args()
  torch.set_num_threads(1)          # a fixed summation order, run to run
  inputs = args.inputs or tempfile.mkdtemp(prefix="golden_inputs_")
  if not args.inputs:
    subprocess.run([args.jax_python, "-m", "tests.train.golden_cases", inputs], cwd=ROOT,
                   check=True, env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"))
  os.makedirs(OUT, exist_ok=True)
  for case in CASES:
    with open(os.path.join(inputs, f"{case}_inputs.json"), encoding="utf-8") as f:
      meta = json.load(f)
    with np.load(os.path.join(inputs, f"{case}_inputs.npz")) as z:
      arrays = {k: z[k] for k in z.files}
    result = train(case, meta, arrays)
    keep = {k: v for k, v in arrays.items() if k.startswith(("batch/", "init/"))}
    np.savez_compressed(os.path.join(OUT, f"{case}.npz"), **keep, **result)
    meta["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    with open(os.path.join(OUT, f"{case}.json"), "w", encoding="utf-8") as f:
      json.dump(meta, f, indent=1, sort_keys=True)
      f.write("\n")


if __name__ == "__main__":
  main()
