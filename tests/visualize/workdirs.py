"""Writes tiny bert_jax workdirs (checkpoint + meta, as train/loop.py saves them) for tests."""
import dataclasses
import json
import os

from bert_jax.checkpoint import manager as checkpoint


def save_workdir(workdir: str, params: dict, model_config, task: str, tokenizer_dir: str,
                 eval_rows=()) -> str:
  """checkpoints/<1>/{state, meta} with state.params = params; metrics.jsonl from rows."""
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False)
  meta = {"task": task, "phase": 0, "config": {"task": task},
          "model_config": dataclasses.asdict(model_config), "tokenizer_dir": tokenizer_dir}
  ckpt.save(1, {"params": params}, meta)
  ckpt.close()
  with open(os.path.join(workdir, "metrics.jsonl"), "w", encoding="utf-8") as f:
    for row in eval_rows:
      f.write(json.dumps(row) + "\n")
  return workdir
