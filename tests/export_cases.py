"""Tiny workdirs of every exportable head, for tests/test_export.py and the fixtures.

Each case is a real task of tasks/registry.py on a tiny config (16 wide, 2 layers),
saved as a training checkpoint (orbax state + the loop's meta + the tokenizer) the way
the loop saves one, with params drawn from numpy (every tensor, LayerNorms and biases
included, far from its init, and independent of JAX's RNG), so the test rebuilds the
very workdir scripts/make_hf_fixtures.py exported. Write the exports (main venv):

  python -m tests.export_cases tests/testdata/hf/export

then the reference venv loads them with transformers and runs them on the batches of
the other HF fixtures (make_hf_fixtures.py --only export runs both steps).
"""
from __future__ import annotations

import os
import sys
import zlib

import flax.linen as nn
import jax
import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HF = os.path.join(ROOT, "tests", "testdata", "hf")
TINY_VOCAB = os.path.join(HF, "tiny_bert", "vocab.txt")   # 122 WordPiece tokens, uncased
TINY_BPE = os.path.join(HF, "tiny_gpt2")                  # 320-token byte-level BPE
EXPORT = os.path.join(HF, "export")
# head -> (config.task, the transformers class it exports as)
CASES = {
    "pretraining": ("bert_pretraining", "BertForPreTraining"),
    "classification": ("classification", "BertForSequenceClassification"),
    "regression": ("classification", "BertForSequenceClassification"),
    "ner": ("ner", "BertForTokenClassification"),
    "squad": ("squad", "BertForQuestionAnswering"),
    "lm": ("lm", "GPT2LMHeadModel"),
}
LABELS = {"classification": ("neg", "neutral", "pos"),
          "ner": ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")}
_BERT = dict(hidden_size=16, num_layers=2, num_heads=4, mlp_dim=37, max_len=64,
             vocab_size=122, type_vocab_size=2, dtype="float32", scan_layers=False)


def config_of(head: str):
  """The run config of a case: the real defaults of its task, tiny sizes."""
  from bert_jax.train import defaults  # pylint: disable=g-import-not-at-top
  task = CASES[head][0]
  if task == "bert_pretraining":
    c = defaults.bert_pretraining_config("bert/tiny")
    c.model.update(_BERT)
    c.model.scan_layers = True                # pretraining trains scanned layers
    c.data.update(vocab_path=TINY_VOCAB, max_seq_length=16, max_predictions_per_seq=4)
    c.train.phases = ()
  elif task == "lm":
    c = _config_file("gpt").get_config("tiny")
    c.model.update(num_layers=2, hidden_size=16, num_heads=4, mlp_dim=64, vocab_size=320,
                   max_len=48, dtype="float32")
    c.data.update(vocab_path=TINY_BPE, max_seq_length=12)
  else:
    metric = {"classification": "accuracy", "regression": "pearson", "ner": "f1",
              "squad": "f1"}[head]
    c = defaults.finetune_config(task, "file", metric, max_seq_length=16,
                                 labels=",".join(LABELS.get(head, ())),
                                 regression=head == "regression", vocab=TINY_VOCAB)
    c.init_from = ""                          # from scratch: config.model + data.vocab
    c.model = defaults.model_config("bert/tiny", **_BERT)
  return c


def _config_file(name: str):
  import importlib.util  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "configs", name + ".py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def noisy_params(abstract) -> dict:
  """Every leaf of an (abstract) param tree as N(0, 0.2) noise (+1 on LayerNorm scales),
  seeded by its path: the same numbers whatever JAX's RNG or the tree's order."""
  def draw(path, leaf):
    name = jax.tree_util.keystr(path)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    offset = 1.0 if name.endswith("['scale']") else 0.0
    return (offset + 0.2 * rng.standard_normal(leaf.shape)).astype(np.float32)
  return jax.tree_util.tree_map_with_path(draw, nn.unbox(abstract))


def bert_batch() -> dict:
  """The padded [CLS] A [SEP] B [SEP] batch of tests/testdata/hf/tiny_bert_outputs.npz
  (3 rows of 16, 11 and 6 tokens over the 122-token vocabulary)."""
  ref = np.load(os.path.join(HF, "tiny_bert_outputs.npz"))
  return {"input_ids": ref["input_ids"].astype(np.int32),
          "input_mask": ref["attention_mask"].astype(np.int32),
          "segment_ids": ref["token_type_ids"].astype(np.int32)}


def gpt_batch() -> dict:
  """The right-padded batch of tests/testdata/hf/tiny_gpt2_outputs.npz (12, 9, 4 tokens);
  padding is segment 0."""
  ref = np.load(os.path.join(HF, "tiny_gpt2_outputs.npz"))
  ids = ref["input_ids"].astype(np.int32)
  return {"input_ids": ids, "segment_ids": ref["attention_mask"].astype(np.int32),
          "positions": np.broadcast_to(np.arange(ids.shape[1], dtype=np.int32),
                                       ids.shape).copy()}


def make_workdir(head: str, workdir: str, steps=((1, None),)):
  """Writes a checkpointed workdir of `head`; returns (task, params).

  steps: (step, eval metrics or None) saved in order; every step holds the same params
  except that steps after the first are scaled by 0.5 (so a wrong pick is visible).
  """
  from bert_jax.checkpoint import manager as checkpoint  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from bert_jax.train.loop import _meta  # pylint: disable=g-import-not-at-top
  config = config_of(head)
  task = registry.get_task(config)
  if CASES[head][0] in ("bert_pretraining", "lm"):
    task.tokenizer_dir = os.path.dirname(config.data.vocab_path) if head != "lm" \
        else config.data.vocab_path       # what prepare() records: the vocabulary's dir
  else:
    task.tokenizer_dir = os.path.join(workdir, "tokenizer")  # as FinetuneTask.prepare
    os.makedirs(task.tokenizer_dir, exist_ok=True)
    with open(os.path.join(task.tokenizer_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
      f.write(task.tokenizer.to_str())
  shapes = task.phase_shapes(dict((config.train.get("phases") or [{}])[0]))
  batch = task.dummy_batch(2, **shapes)
  params = noisy_params(jax.eval_shape(task.init, jax.random.key(0), batch)["params"])
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), async_save=False,
                                 best_metric=config.train.best_metric or None,
                                 best_mode=config.train.best_mode)
  for i, (step, metrics) in enumerate(steps):
    state = {"params": params if i == 0 else jax.tree_util.tree_map(lambda x: x * 0.5, params),
             "step": np.asarray(step, np.int32)}
    ckpt.save(step, state, _meta(config, task, 0), metrics=metrics)
  ckpt.close()
  return task, params


def our_outputs(head: str, task, params) -> dict:
  """Our eval-mode logits on the case's batch, named as transformers names them."""
  apply = jax.jit(lambda p, b: task.apply(p, b, None, train=False))
  if head == "lm":
    return {"logits": np.asarray(apply(params, gpt_batch())["logits"])}
  batch = bert_batch()
  if head == "pretraining":  # MLM logits at every position
    positions = np.broadcast_to(np.arange(16, dtype=np.int32), (3, 16)).copy()  # [B, T]
    out = apply(params, dict(batch, masked_lm_positions=positions))
    return {"prediction_logits": np.asarray(out["mlm_logits"]),
            "seq_relationship_logits": np.asarray(out["nsp_logits"])}
  out = apply(params, batch)
  if head == "squad":
    return {"start_logits": np.asarray(out["start_logits"]),
            "end_logits": np.asarray(out["end_logits"])}
  return {"logits": np.asarray(out["logits"])}


def our_ids(head: str, task, text: str) -> list[int]:
  """The run's tokenizer's ids of `text` (BERT: [CLS] ... [SEP], as our features)."""
  if head == "lm":
    from bert_jax.interop import gpt2  # pylint: disable=g-import-not-at-top
    return gpt2.load_gpt2_tokenizer(TINY_BPE).encode(text).ids
  from bert_jax.data.tokenizer import load_tokenizer  # pylint: disable=g-import-not-at-top
  tok = load_tokenizer(TINY_VOCAB) if head == "pretraining" else task.tokenizer
  return tok.encode(text).ids


def main(out_dir: str) -> None:
  """Exports every case into out_dir/<head>/."""
  import tempfile  # pylint: disable=g-import-not-at-top
  from bert_jax import export  # pylint: disable=g-import-not-at-top
  os.makedirs(out_dir, exist_ok=True)
  for head in CASES:
    with tempfile.TemporaryDirectory() as workdir:
      make_workdir(head, workdir)
      target = os.path.join(out_dir, head)
      print(head, export.export(workdir, target, "latest")[0], "->", target)


if __name__ == "__main__":
  main(sys.argv[1] if len(sys.argv) > 1 else EXPORT)
