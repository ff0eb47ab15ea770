"""Token classification (NER) fine-tuning: a tag per word on its first sub-token.

Run (CoNLL-2003 from tfds; needs requirements-tf.txt and network once):
  python -m bert_jax.main --config configs/finetune_ner.py:conll2003 \\
      --workdir workdirs/conll --config.init_from=/path/to/bert-base-cased
Your own data (JSONL {"tokens": [...], "tags": [...]}, or CoNLL columns):
  python -m bert_jax.main --config configs/finetune_ner.py:file --workdir workdirs/ner \\
      --config.data.train_file=train.jsonl --config.data.eval_file=dev.jsonl
Predict: add --config.mode=predict --config.predict.input_file=sentences.txt.
Metric: entity-level micro F1 with seqeval's definition; the best epoch is kept by it.
Strict IOB2 entities (seqeval mode="strict", scheme=IOB2): add --config.ner_mode=strict.
"""
from bert_jax.train.defaults import finetune_config


def get_config(arg=None):
  arg = arg or "conll2003"
  if arg not in ("conll2003", "file"):
    raise ValueError(f"unknown arg {arg!r}: conll2003 or file")
  eval_split = "dev" if arg == "conll2003" else "validation"
  c = finetune_config("ner", arg, "f1", eval_split=eval_split)
  c.train.learning_rate = 5e-5
  # Entities for the metrics: "default" (seqeval's default, conlleval-like: an I- tag
  # after O opens a chunk) | "strict" (seqeval's strict IOB2: only B-X I-X... chunks).
  c.ner_mode = "default"
  return c
