"""An offline classification set big enough for length grouping: which corpus a sentence is from.

bench/finetune/vs_trainer.py --dataset sources. The embedded corpus (bert_jax/data/
corpora.py) ships two sources in gensim's test data: the Lee news corpus (300 Australian
news stories) and the ~100-article English Wikipedia excerpt. Every distinct Lee sentence
of 4 words or more is labelled 1 (news, 2,593); as many distinct Wikipedia sentences of 4
words or more (none occurs in both corpora), drawn without replacement by a fixed-seed
RandomState, are labelled 0 (encyclopedia). The union is shuffled (the same seed) and
`eval_per_class` (150) of each label held out: 4,886 train, 300 held out, no sentence in
both. The lengths are the corpora's own (no truncation here; the tokenizer truncates at max_length).
Deterministic: the same files give the same sets on every machine.
"""
from __future__ import annotations

import csv
import os

import numpy as np

MIN_WORDS = 4  # drops headings' leftovers and bylines ("University of Illinois.")


def _sentences(reader, name: str) -> list[str]:
  from bert_jax.data import corpora, text_cleaning  # pylint: disable=g-import-not-at-top
  stats = text_cleaning.Stats()
  sentences = [s for doc in reader(corpora.gensim_test_data(name), stats) for s in doc
               if len(s.split()) >= MIN_WORDS]
  # Once each, in order: the Lee corpus repeats 85 sentences (quotes in several stories),
  # which would otherwise land in both train and held out.
  return list(dict.fromkeys(sentences))


def build(eval_per_class: int = 150, seed: int = 0) -> dict:
  """{train,eval}_{texts,labels}: labels 0 (Wikipedia) / 1 (Lee news), balanced."""
  from bert_jax.data import corpora  # pylint: disable=g-import-not-at-top
  news = _sentences(corpora.lee_documents, corpora.LEE_CORPUS)
  wiki = _sentences(corpora.wiki_dump_documents, corpora.WIKI_EXCERPT)
  rng = np.random.RandomState(seed)
  wiki = [wiki[i] for i in sorted(rng.choice(len(wiki), len(news), replace=False))]
  out = {"train_texts": [], "train_labels": [], "eval_texts": [], "eval_labels": []}
  for label, texts in ((0, wiki), (1, news)):
    order = rng.permutation(len(texts))
    for rank, i in enumerate(order):
      role = "eval" if rank < eval_per_class else "train"
      out[f"{role}_texts"].append(texts[i])
      out[f"{role}_labels"].append(label)
  for role in ("train", "eval"):  # interleave the labels (the files' order is not a cue)
    perm = rng.permutation(len(out[f"{role}_labels"]))
    out[f"{role}_texts"] = [out[f"{role}_texts"][i] for i in perm]
    out[f"{role}_labels"] = [out[f"{role}_labels"][i] for i in perm]
  return out


def write_csv(data: dict, directory: str) -> dict:
  """Writes train.csv / heldout.csv (columns sentence,label); returns the config overrides
  that make configs/finetune_classification.py:polarity read them."""
  paths = {}
  for role, name in (("train", "train.csv"), ("eval", "heldout.csv")):
    paths[role] = os.path.join(directory, name)
    with open(paths[role], "w", encoding="utf-8", newline="") as f:
      w = csv.writer(f)
      w.writerow(["sentence", "label"])
      w.writerows(zip(data[f"{role}_texts"], data[f"{role}_labels"]))
  return {"data.source": "file", "data.train_file": paths["train"],
          "data.eval_file": paths["eval"]}
