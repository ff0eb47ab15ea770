"""Span-extraction QA fine-tuning (SQuAD): start/end logits, doc stride, n-best.

Run (SQuAD v1.1 from tfds: its builder needs no TensorFlow; network once):
  python -m bert_jax.main --config configs/finetune_squad.py:v1.1 \\
      --workdir workdirs/squad --config.init_from=/path/to/bert-base-uncased
SQuAD 2.0 (no-answer questions): arg v2.0. Your own SQuAD-format JSON files:
  python -m bert_jax.main --config configs/finetune_squad.py:file --workdir workdirs/qa \\
      --config.data.train_file=train.json --config.data.eval_file=dev.json
Predict: add --config.mode=predict --config.predict.input_file=questions.json.
Recipe: google-research/bert run_squad.py (lr 3e-5, 2 epochs, seq 384, stride 128).
"""
from bert_jax.train.defaults import finetune_config


def get_config(arg=None):
  arg = arg or "v1.1"
  if arg not in ("v1.1", "v2.0", "file"):
    raise ValueError(f"unknown arg {arg!r}: v1.1, v2.0 or file")
  source = "file" if arg == "file" else f"squad/{arg}"
  c = finetune_config("squad", source, "f1", max_seq_length=384,
                      version_2_with_negative=arg == "v2.0")
  c.train.learning_rate = 3e-5
  c.train.num_epochs = 2.0
  return c
