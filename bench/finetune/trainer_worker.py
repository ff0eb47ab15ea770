"""transformers' Trainer side of bench/finetune/vs_trainer.py: what a user runs.

Started by the driver with the reference venv's python (torch + transformers +
accelerate, requirements-ref.txt), never run by hand:

  .venv-ref/bin/python bench/finetune/trainer_worker.py --spec SPEC.json

SPEC (written by the driver): the model directory (the packaged all-MiniLM-L6-v2), the
train and held-out texts and label ids, max_length, the batch size in examples, epochs,
the optimizer settings (AdamW, linear warmup then decay), seed, threads and
group_by_length. The recipe is the course's: AutoTokenizer (truncation to max_length, no
padding), `DataCollatorWithPadding` (each batch padded to its longest row),
`BertForSequenceClassification.from_pretrained(dir, num_labels=2)`, `Trainer.train()`,
then `Trainer.predict` on the held-out texts. group_by_length=True is the tuned set-up
(LengthGroupedSampler: batches of similar lengths, in megabatches of 50 batches).
Answers one JSON line: every step's seconds (a TrainerCallback clock), the real tokens and
computed positions of every batch (counted in the collator), held-out accuracy, the
seconds of train() and of the whole worker.
"""
from __future__ import annotations

import os
import sys
import time

T0 = time.perf_counter()
_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/
import bench_util  # noqa: E402  pylint: disable=wrong-import-position

PROG = "trainer_finetune_worker"


def main():
  spec = bench_util.read_spec(PROG)
  np, torch, transformers = bench_util.worker_imports(
      PROG, bench_util.REF_VENV, "numpy", "torch", "transformers")
  torch.set_num_threads(int(spec["threads"]))
  transformers.logging.set_verbosity_error()  # "newly initialized classifier" is expected
  t = spec["train"]
  tok = transformers.AutoTokenizer.from_pretrained(spec["model_dir"])

  def dataset(texts, labels):  # a list of feature dicts: what Trainer's collator takes
    enc = tok(texts, truncation=True, max_length=int(spec["max_length"]))
    return [dict({k: v[i] for k, v in enc.items()}, labels=int(labels[i]))
            for i in range(len(texts))]

  train = dataset(spec["train_texts"], spec["train_labels"])
  heldout = dataset(spec["eval_texts"], spec["eval_labels"])
  pad = transformers.DataCollatorWithPadding(tok)
  counts = {"real": 0, "computed": 0, "batches": 0}

  def collate(features):  # the course's collator, counting what each batch computes
    batch = pad(features)
    if torch.is_grad_enabled() and model.training:
      counts["real"] += int(batch["attention_mask"].sum())
      counts["computed"] += int(batch["attention_mask"].numel())
      counts["batches"] += 1
    return batch

  model = transformers.BertForSequenceClassification.from_pretrained(
      spec["model_dir"], num_labels=2).float()
  args = transformers.TrainingArguments(
      output_dir=spec["output_dir"], per_device_train_batch_size=int(spec["batch_size"]),
      per_device_eval_batch_size=int(spec["batch_size"]),
      num_train_epochs=float(spec["epochs"]), learning_rate=t["learning_rate"],
      weight_decay=t["weight_decay"], adam_beta1=t["b1"], adam_beta2=t["b2"],
      adam_epsilon=t["eps"], max_grad_norm=t["grad_clip_norm"], warmup_ratio=t["warmup_fraction"],
      lr_scheduler_type="linear", seed=int(spec["seed"]), group_by_length=bool(spec["group_by_length"]),
      bf16=bool(spec.get("bf16")),  # autocast: the products in bfloat16 (AMX on such CPUs)
      save_strategy="no", eval_strategy="no", logging_strategy="no", report_to=[],
      use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
  step_s = []

  class Clock(transformers.TrainerCallback):
    def on_step_begin(self, *a, **k):
      self.t0 = time.perf_counter()  # pylint: disable=attribute-defined-outside-init

    def on_step_end(self, *a, **k):
      step_s.append(time.perf_counter() - self.t0)

  trainer = transformers.Trainer(model=model, args=args, train_dataset=train,
                                 data_collator=collate, callbacks=[Clock()])
  t0 = time.perf_counter()
  out = trainer.train()
  train_s = time.perf_counter() - t0
  pred = trainer.predict(heldout)
  accuracy = float(np.mean(np.argmax(pred.predictions, -1) == np.asarray(spec["eval_labels"])))
  bench_util.reply({"step_s": step_s, "train_s": train_s, "worker_s": time.perf_counter() - T0,
                    "train_loss": float(out.training_loss), "heldout_accuracy": accuracy,
                    "real_tokens": counts["real"], "computed_positions": counts["computed"],
                    "batches": counts["batches"], "threads": torch.get_num_threads(),
                    "versions": f"torch {torch.__version__}, transformers "
                                f"{transformers.__version__}"})


if __name__ == "__main__":
  main()
