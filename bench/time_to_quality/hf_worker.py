"""transformers' side of bench/time_to_quality/time_to_quality.py: run_mlm.py's recipe under a clock.

Started by the driver with the reference venv's python (torch + transformers +
accelerate, requirements-ref.txt), never run by hand:

  .venv-ref/bin/python bench/time_to_quality/hf_worker.py --spec SPEC.json

What a researcher gets from transformers' examples/pytorch/language-modeling/run_mlm.py
(not in the wheel; its steps reproduced here with the same library calls) with
`--max_seq_length 128` (bert_tiny's positions; run_mlm's own default, the tokenizer's
model_max_length capped at 1024, exceeds the model's table) and no other flag:
- tokenizer: ours, as `BertTokenizerFast(vocab_file=our vocab.txt)` (uncased, as our
  trained vocabulary; the driver's sample of our token ids is checked against it);
- data, run_mlm's non-line-by-line path: every line of the training documents tokenized
  with special tokens (`[CLS] line [SEP]`, return_special_tokens_mask) and group_texts:
  all concatenated, cut into 128-token rows, the remainder dropped;
- `DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)`: 15% of the
  non-special tokens of each batch, 80% [MASK] / 10% random / 10% kept, labels -100
  elsewhere; masks drawn anew for every batch;
- model: `BertForMaskedLM(BertConfig(...))` with bert_tiny's sizes and BertConfig's
  defaults for the rest (post-LN, GELU, hidden and attention dropout 0.1, learned absolute
  positions, init std 0.02, LayerNorm eps 1e-12); the MLM head scores the whole vocabulary
  at all 128 positions;
- `Trainer` with TrainingArguments' defaults of transformers 4.57 unless the spec's recipe
  says otherwise: AdamW (optim adamw_torch_fused on torch >= 2.8) lr 5e-5, betas 0.9 /
  0.999, eps 1e-8, weight decay 0, max_grad_norm 1.0, linear schedule, no warmup, 3
  epochs, per_device_train_batch_size 8, seed 42, shuffled each epoch.
SPEC: `vocab`, `train_text`, `masked` (the scorer's fixed set), `curve`, `check` (lines and
our ids for them), `model` sizes, `recipe` (TrainingArguments overrides; `fit_steps`:
max_steps = the measured steps/s x budget, so a schedule ends with the budget),
`budget_s`, `every_s`, `max_steps` (0: none), `threads`, `interleave` (pause for the
driver before the clock starts and after every score: bench_util.pause); the fit's rate
is measured over PROBE_STEPS steps after PROBE_WARMUP warm-up steps, in a throw-away
Trainer (off the clock).
Training stops at `budget_s` of training wall clock (the Trainer's clock from
on_train_begin, with the scoring paused out of it) or at the end of its schedule; every
`every_s` (and at step 0 and at the stop) the model is scored on the fixed set.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
import bench_util  # noqa: E402  pylint: disable=wrong-import-position
import scorer as ttq_scorer  # noqa: E402  pylint: disable=wrong-import-position

PROG = "ttq_hf_worker"
SEQ = 128
PREDICT_BATCH = 64
PROBE_WARMUP = 3  # untimed first steps of the fit_steps probe
PROBE_STEPS = 24  # its timed steps (~25 s at bert_tiny dims, off the clock)


def group_texts(ids: list, seq: int) -> list:
  """run_mlm's group_texts: the lines' ids concatenated, cut into `seq`-long rows."""
  flat = [t for line in ids for t in line]
  n = len(flat) // seq * seq
  return [flat[i:i + seq] for i in range(0, n, seq)]


def main():
  spec = bench_util.read_spec(PROG)
  np, torch, transformers = bench_util.worker_imports(
      PROG, bench_util.REF_VENV, "numpy", "torch", "transformers")
  try:
    import accelerate  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    bench_util.fail(PROG, f"{e} in {sys.executable} (Trainer needs it; {bench_util.REF_VENV})")
  threads = int(spec["threads"])
  torch.set_num_threads(threads)
  transformers.utils.logging.set_verbosity_error()

  tok = transformers.BertTokenizerFast(vocab_file=spec["vocab"], do_lower_case=True)
  lines, ours = spec["check"]
  theirs = tok(lines, add_special_tokens=False)["input_ids"]
  if theirs != ours:
    bad = next(i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b)
    bench_util.fail(PROG, f"BertTokenizerFast differs from our tokenizer on {lines[bad]!r}")
  with open(spec["train_text"], encoding="utf-8") as f:
    text = [l.rstrip("\n") for l in f]
  enc = tok(text, return_special_tokens_mask=True)
  ids = group_texts(enc["input_ids"], SEQ)
  special = group_texts(enc["special_tokens_mask"], SEQ)

  class Rows(torch.utils.data.Dataset):
    def __len__(self):
      return len(ids)

    def __getitem__(self, i):
      return {"input_ids": ids[i], "attention_mask": [1] * SEQ, "token_type_ids": [0] * SEQ,
              "special_tokens_mask": special[i]}

  m = spec["model"]
  cfg = transformers.BertConfig(vocab_size=m["vocab_size"], hidden_size=m["hidden_size"],
                                num_hidden_layers=m["num_layers"],
                                num_attention_heads=m["num_heads"],
                                intermediate_size=m["mlp_dim"],
                                max_position_embeddings=SEQ)
  collator = transformers.DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
  masked = ttq_scorer.load(spec["masked"])
  recipe = dict(spec["recipe"])
  fit = recipe.pop("fit_steps", False)
  out_dir = tempfile.mkdtemp(prefix="ttq_hf_")

  def trainer_for(model, callbacks, **extra):
    args = transformers.TrainingArguments(
        output_dir=out_dir, save_strategy="no", report_to=[], logging_strategy="no",
        disable_tqdm=True, use_cpu=True, dataloader_num_workers=0, **{**recipe, **extra})
    return transformers.Trainer(model=model, args=args, train_dataset=Rows(),
                                data_collator=collator, callbacks=callbacks)

  def fresh_model():
    torch.manual_seed(42)  # Trainer seeds again (args.seed) before it builds anything
    return transformers.BertForMaskedLM(cfg).float()

  if fit:  # run_mlm's user who sets max_steps to what fits the budget: a measured rate
    # PROBE_WARMUP untimed steps, then PROBE_STEPS timed: the idle run of 2026-11-27
    # fitted from 4 timed steps, which ran slower than the steady state, so the tuned
    # schedule ended at 250 of its 360 s (its decay finished early; the rest went unused).
    rate = make_step_rate(transformers, warm=PROBE_WARMUP)
    trainer_for(fresh_model(), [rate], max_steps=PROBE_WARMUP + PROBE_STEPS).train()
    recipe["max_steps"] = max(1, int(rate.per_s() * float(spec["budget_s"])))

  model = fresh_model()
  curve = open(spec["curve"], "w", encoding="utf-8")

  def score(step: int, seconds: float, lr: float) -> None:
    if not spec.get("score", True):  # a timed window only
      return
    model.eval()
    preds = []
    with torch.no_grad():
      for b in ttq_scorer.batches(masked, PREDICT_BATCH):
        logits = model(input_ids=torch.from_numpy(b["input_ids"]).long(),
                       attention_mask=torch.from_numpy(b["attention_mask"]).long(),
                       token_type_ids=torch.zeros(b["input_ids"].shape, dtype=torch.long)
                       ).logits                                          # [B, L, V]
        pos = torch.from_numpy(b["positions"]).long()                     # [B, P]
        at = torch.gather(logits, 1, pos[..., None].expand(-1, -1, logits.shape[-1]))
        preds.append(at.argmax(-1).numpy())                              # [B, P]
    model.train()
    acc = ttq_scorer.accuracy(np.concatenate(preds), masked)
    curve.write(json.dumps({"step": step, "seconds": seconds, "tokens": step * batch * SEQ,
                            "accuracy": acc, "learning_rate": lr}) + "\n")
    curve.flush()

  clock = make_clock(transformers, score, float(spec["budget_s"]), float(spec["every_s"]),
                int(spec.get("max_steps") or 0), spec.get("interleave", False))
  trainer = trainer_for(model, [clock])
  batch = trainer.args.per_device_train_batch_size
  trainer.train()
  curve.close()
  tokens = clock.step * batch * SEQ  # group_texts rows: every token is real
  steady = clock.steady
  rate = ((tokens - steady[1]) / max(clock.seconds - steady[0], 1e-9)
          if steady and clock.step > 2 else 0.0)
  bench_util.reply({"steps": clock.step, "seconds": clock.seconds, "tokens": tokens,
                    "tokens_per_s": tokens / max(clock.seconds, 1e-9),
                    "steady_tokens_per_s": rate, "stopped": clock.reason,
                    "batch_size": batch, "num_steps": trainer.state.max_steps,
                    "train_rows": len(ids), "threads": torch.get_num_threads(),
                    "versions": f"torch {torch.__version__}, transformers "
                                f"{transformers.__version__}"})


def make_step_rate(transformers, warm: int):
  """A callback measuring steps/s after `warm` steps (the fit_steps probe)."""

  class _Rate(transformers.TrainerCallback):
    t = None
    steps = 0

    def on_step_end(self, args, state, control, **kw):
      if state.global_step == warm:
        self.t = time.perf_counter()
      elif state.global_step > warm:
        self.steps = state.global_step - warm
        self.dt = time.perf_counter() - self.t

    def per_s(self) -> float:
      return self.steps / self.dt
  return _Rate()


def make_clock(transformers, score, budget: float, every: float, max_steps: int,
               interleave: bool = False):
  """The training clock: scores off the clock, stops at the budget (module docstring);
  `interleave`: waits for the driver before the clock starts and after every score."""

  class _Clock(transformers.TrainerCallback):
    step, seconds, reason, steady = 0, 0.0, "schedule end", None

    def on_train_begin(self, args, state, control, **kw):
      if interleave:
        bench_util.pause({"ready": True, "num_steps": state.max_steps})
      score(0, 0.0, args.learning_rate if args.warmup_ratio == 0 and not args.warmup_steps
            else 0.0)
      self.paused, self.next = 0.0, every
      self.t0 = time.perf_counter()

    def clock(self) -> float:
      return time.perf_counter() - self.t0 - self.paused

    def on_step_end(self, args, state, control, **kw):
      self.step = state.global_step
      now = self.clock()
      if self.step == 2:
        self.steady = (now, self.step * args.per_device_train_batch_size * SEQ)
      if now >= budget:
        control.should_training_stop, self.reason = True, "budget"
      elif max_steps and self.step >= max_steps:
        control.should_training_stop, self.reason = True, "max_steps"
      last = control.should_training_stop or self.step >= state.max_steps
      if last or now >= self.next:
        stop = time.perf_counter()
        lr = kw["lr_scheduler"].get_last_lr()[0]
        score(self.step, now, lr)
        if interleave and not last:  # its turn ends; the wait is off the clock too
          bench_util.pause({"step": self.step, "seconds": now,
                            "tokens": self.step * args.per_device_train_batch_size * SEQ})
        self.paused += time.perf_counter() - stop
        while self.next <= now:
          self.next += every
      self.seconds = now
  return _Clock()


if __name__ == "__main__":
  main()
