"""NerTask's evaluation in both entity modes equals seqeval on the same word tags.

The model is not run: the per-token predictions are built so that each word's first
sub-token carries a chosen tag, and host_metrics must map them back to words and score
them as seqeval does (config.ner_mode "default" or "strict").
"""
import importlib.util
import json
import pathlib
import warnings

import numpy as np
import pytest
from seqeval import metrics as seqeval_metrics
from seqeval.scheme import IOB2

from bert_jax.tasks import registry

ROOT = pathlib.Path(__file__).resolve().parents[4]
TINY_BERT = ROOT / "tests" / "testdata" / "hf" / "tiny_bert"
SENTENCES = [
    (["Peter", "Blackburn", "visits", "Paris"], ["B-PER", "I-PER", "O", "B-LOC"]),
    (["EU", "rejects", "German", "call"], ["B-ORG", "O", "B-MISC", "O"]),
]
# An I- start and a B-/I- type switch: the two modes read them differently.
PREDICTED = [["I-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-MISC", "I-LOC"]]


def ner_config(tmp_path, mode=None):
  spec = importlib.util.spec_from_file_location("finetune_ner",
                                                ROOT / "configs" / "finetune_ner.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config("file")
  assert c.ner_mode == "default"  # today's behaviour stays the default
  path = tmp_path / "ner.jsonl"
  path.write_text("".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in SENTENCES))
  c.init_from = str(TINY_BERT)
  c.data.update(train_file=str(path), eval_file=str(path), max_seq_length=32,
                labels="O,B-PER,I-PER,B-LOC,I-LOC,B-ORG,I-ORG,B-MISC,I-MISC")
  if mode:
    c.ner_mode = mode
  return c


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_host_metrics_equal_seqeval_in_both_modes(tmp_path, mode):
  task = registry.get_task(ner_config(tmp_path, mode))
  task.prepare(str(tmp_path / "work"))
  f = task.eval_features
  word_ids = f["word_ids"]  # [F, L], -1 off words
  tag_ids = np.zeros_like(word_ids)
  for row, example in enumerate(f["example_index"]):
    for pos, word in enumerate(word_ids[row]):
      if word >= 0:
        tag_ids[row, pos] = task.label_list.index(PREDICTED[example][word])
  outputs = {"feature_index": np.arange(len(word_ids), dtype=np.int32),
             "predictions": tag_ids}
  got = task.host_metrics(outputs)

  gold = [t for _, t in SENTENCES]
  kwargs = {"mode": "strict", "scheme": IOB2} if mode == "strict" else {}
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    report = seqeval_metrics.classification_report(gold, PREDICTED, output_dict=True,
                                                   **kwargs)
  micro = report["micro avg"]
  assert got["precision"] == pytest.approx(micro["precision"], abs=1e-12)
  assert got["recall"] == pytest.approx(micro["recall"], abs=1e-12)
  assert got["f1"] == pytest.approx(micro["f1-score"], abs=1e-12)
  types = {k for k in report if not k.endswith(" avg")}
  assert {k.split("/", 1)[1] for k in got if k.startswith("f1/")} == types
  for t in types:
    for ours, theirs in (("precision", "precision"), ("recall", "recall"),
                         ("f1", "f1-score"), ("support", "support")):
      assert got[f"{ours}/{t}"] == pytest.approx(report[t][theirs], abs=1e-12), (ours, t)
  # By hand: gold PER(0-1) LOC | ORG MISC. Default reads PER(0-1) LOC | ORG MISC LOC(3):
  # 4 of 5 predicted right, all 4 gold found. Strict drops the I- start and the I-LOC
  # after B-MISC: LOC | ORG MISC, 3 of 3 right, 3 of 4 gold found.
  want = (0.8, 1.0) if mode == "default" else (1.0, 0.75)
  assert (got["precision"], got["recall"]) == pytest.approx(want, abs=1e-12)


def test_ner_mode_is_checked_at_construction(tmp_path):
  c = ner_config(tmp_path, "lenient")
  with pytest.raises(ValueError, match="ner_mode='lenient'"):
    registry.get_task(c)
  c = ner_config(tmp_path, "strict")
  c.data.labels = "O,B-PER,I-PER,E-PER,S-PER"
  with pytest.raises(ValueError, match=r"strict.*\['E-PER', 'S-PER'\]"):
    registry.get_task(c)
