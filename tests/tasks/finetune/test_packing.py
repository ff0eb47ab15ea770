"""Packed fine-tuning rows (data.packing) against the padded path, one example a row.

The reference is the padded path itself, which tests/train/test_golden.py and
tests/test_export.py hold equal to transformers' BertForSequenceClassification /
BertForTokenClassification: packed rows must give the same logits, pooled vectors and
token outputs (1e-5, float32), the same gradients of a batch holding the same examples
(1e-5, class weights included), and the same official metrics (accuracy, macro-F1,
seqeval F1). The model is the committed tiny HF BERT (2 layers, 32 wide), run eagerly.
"""
import os

import jax
import numpy as np
import pytest

from bert_jax.data.packing import first_fit_decreasing
from bert_jax.tasks import registry
from bert_jax.tasks.finetune import packing
from bert_jax.train.defaults import finetune_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TINY_BERT = os.path.join(ROOT, "tests", "testdata", "hf", "tiny_bert")
WORDS = "the a film story cast plot was is very quite dull fine funny long slow sharp".split()


def _sentence(rng, n):
  return " ".join(rng.choice(WORDS, n))


@pytest.fixture(scope="module")
def pair_file(tmp_path_factory):
  """24 sentence pairs of 1..5 words each, 3 labels of 6, 6 and 12 examples."""
  rng = np.random.default_rng(0)
  path = tmp_path_factory.mktemp("packing") / "pairs.csv"
  lines = [f'"{_sentence(rng, rng.integers(1, 6))}","{_sentence(rng, rng.integers(1, 6))}",'
           f'{"abcc"[i % 4]}' for i in range(24)]
  path.write_text("sentence,sentence2,label\n" + "\n".join(lines) + "\n")
  return str(path)


@pytest.fixture(scope="module")
def mixed_pair_file(tmp_path_factory):
  """30 sentence pairs, 8 of 5 + 5 words (longer than a block of 16 tokens) and 22 of
  one word each (several a block), 3 labels."""
  rng = np.random.default_rng(2)
  path = tmp_path_factory.mktemp("packing") / "mixed_pairs.csv"
  words = [5] * 8 + [1] * 22
  lines = [f'"{_sentence(rng, n)}","{_sentence(rng, n)}",{"abcc"[i % 4]}'
           for i, n in enumerate(words)]
  path.write_text("sentence,sentence2,label\n" + "\n".join(lines) + "\n")
  return str(path)


@pytest.fixture(scope="module")
def ner_file(tmp_path_factory):
  """20 sentences of 1..14 words with IOB2 tags."""
  import json  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(1)
  tags = ["O", "B-PER", "I-PER", "B-LOC"]
  path = tmp_path_factory.mktemp("packing") / "ner.jsonl"
  with open(path, "w") as f:
    for _ in range(20):
      n = int(rng.integers(1, 15))
      f.write(json.dumps({"tokens": list(rng.choice(WORDS, n)),
                          "tags": list(rng.choice(tags, n))}) + "\n")
  return str(path)


def _task(task, packed, path, pooling="cls", **extra):
  metric = "f1" if task == "ner" else "accuracy"
  c = finetune_config(task, "file", metric, max_seq_length=32, train_file=path,
                      eval_file=path, packing=packed, max_examples_per_row=4, **extra)
  c.init_from = TINY_BERT
  c.pooling = pooling
  c.model.update(dropout_rate=0.0, attention_dropout_rate=0.0, dtype="float32")
  c.train.class_weights = "inverse_frequency"
  t = registry.get_task(c)
  t.prepare(os.path.join(os.path.dirname(path),
                         f"work_{task}_{packed}_{extra.get('packing_block', 0)}"))
  return t


def _params(task):
  params = jax.jit(task.init)(jax.random.key(0), task.dummy_batch(8, 32))["params"]
  # A random pooler/classifier on top of the pretrained encoder.
  params = jax.tree_util.tree_map(lambda x: getattr(x, "value", x), params,
                                  is_leaf=lambda x: hasattr(x, "value"))
  return dict(task.load_pretrained_params(task.config.init_from, params))


def _one_batch(iterator):
  batches = list(iterator)
  return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def _logits(task, params, batch):
  return np.asarray(jax.jit(lambda p, b: task.apply(p, b, None, False)["logits"])(params, batch))


def _outputs(task, params, batch):
  """(predict outputs, the modules' outputs) of an eval forward pass."""
  def run(p, b):
    out, mid = task.eval_model.apply({"params": p}, **task._inputs(b),  # pylint: disable=protected-access
                                     capture_intermediates=True)
    return out["logits"], mid["intermediates"]
  logits, mid = jax.device_get(jax.jit(run)(params, batch))
  return {"feature_index": batch["feature_index"], "logits": logits}, mid


def _loss_and_grads(task, params, batch):
  def loss(p, b):  # train mode without dropout (rate 0): the loss the train step takes
    out = task.apply(p, b, jax.random.key(0), train=True)
    return task.loss_parts(out, b)["task"] / task.loss_weights(b)["task"]
  return jax.jit(jax.value_and_grad(loss))(params, batch)


# ------------------------------------------------------------------ the packer
def test_first_fit_decreasing_is_the_textbook_packing_and_respects_the_cap():
  # FFD on (2, 5, 4, 7, 1, 3, 8) into bins of 10: 8+2 | 7+3 | 5+4+1, three full bins.
  row_of = first_fit_decreasing([2, 5, 4, 7, 1, 3, 8], 10)
  assert [sorted(np.flatnonzero(row_of == r).tolist()) for r in range(3)] == [
      [0, 6], [3, 5], [1, 2, 4]]
  lengths = np.random.default_rng(0).integers(1, 40, 500)
  row_of = first_fit_decreasing(lengths, 64, max_per_row=3)
  assert row_of.min() == 0 and np.bincount(row_of).max() <= 3
  assert np.all(np.bincount(row_of, weights=lengths) <= 64)
  with pytest.raises(ValueError, match=r"lengths must be in \[1, 64\]"):
    first_fit_decreasing([65], 64)
  # Into rows already open only (free tokens 5 and 4, room for 2 and 1 more): 4 -> row 0,
  # 3 -> row 1, 1 -> row 0 (now full by count), 2 fits nowhere.
  free, room = np.array([5, 4]), np.array([2, 1])
  np.testing.assert_array_equal(first_fit_decreasing([2, 4, 1, 3], 10, 3, free, room),
                                [-1, 0, 0, 1])
  np.testing.assert_array_equal(free, [0, 1])
  np.testing.assert_array_equal(room, [0, 0])


def test_epochs_hold_every_example_once_reshuffled_and_resume_exactly(pair_file):
  task = _task("classification", True, pair_file)
  plan = task.plans["train"]
  n, rows = len(plan.lengths), plan.num_rows
  assert 0.8 < plan.fill <= 1.0 and rows < n
  first, second = plan.epoch_members(0, 0), plan.epoch_members(0, 1)
  for members in (first, second):
    assert sorted(members[members >= 0].tolist()) == list(range(n))
    assert np.all(np.where(members >= 0, plan.lengths[members], 0).sum(1) <= 32)
  assert not np.array_equal(first, second)  # new row mates, not only a new row order
  # Batches of an epoch's rows: every example once a batch, in a new order each time.
  it = task.train_iterator({}, rows, 0, 1, seed=3)
  epochs = [next(it)["feature_index"] for _ in range(2)]
  for seen in epochs:
    assert sorted(seen[seen >= 0].tolist()) == list(range(n))
  assert not np.array_equal(epochs[0], epochs[1])
  state = it.get_state()
  want = [next(it) for _ in range(2)]
  again = task.train_iterator({}, rows, 0, 1, seed=3)
  again.set_state(state)
  for batch in want:
    got = next(again)
    for k in batch:
      np.testing.assert_array_equal(got[k], batch[k], err_msg=k)
  # Evaluation over 2 processes: every feature exactly once.
  index = np.concatenate([b["feature_index"] for p in (0, 1)
                          for b in task.eval_iterator({}, 2, p, 2)])
  assert sorted(index[index >= 0].tolist()) == list(range(n))


# ------------------------------------------------------- exactness: classification
@pytest.fixture(scope="module")
def pair_tasks(pair_file, mixed_pair_file):
  """(padded task, packed task, params) per pooling and block (the mixed pairs with
  blocks), built once."""
  cache = {}

  def get(pooling, block=0):
    if (pooling, block) not in cache:
      path = mixed_pair_file if block else pair_file
      padded, packed = (_task("classification", p, path, text_b_key="sentence2",
                              pooling=pooling, packing_block=block) for p in (False, True))
      cache[(pooling, block)] = padded, packed, _params(padded)
    return cache[(pooling, block)]
  return get


def _block_rows_only(task, batch):
  """The rows of a packed batch laid out in blocks (the plan's rows after its whole ones)."""
  plan = task.plans["eval"]
  rows = np.arange(plan.num_whole, plan.num_rows)
  k, total = plan.max_per_row, len(batch["input_ids"])  # eval rows in the plan's order
  slots = (rows[:, None] * k + np.arange(k)).reshape(-1)
  return {key: v[rows] if len(v) == total else v[slots] for key, v in batch.items()}


@pytest.mark.parametrize("pooling,block,only_blocks", [
    ("cls", 0, False), ("mean", 0, False), ("cls", 16, False), ("mean", 16, True)])
def test_packed_classification_equals_padded(pair_tasks, pooling, block, only_blocks):
  """Rows of 32 whole, and in blocks of 16 (data.packing_block; only_blocks: a batch of
  rows in blocks alone, which attends block by block)."""
  padded, packed, params = pair_tasks(pooling, block)
  n = len(padded.eval_features["input_ids"])
  assert packed.plans["eval"].num_rows < n  # pairs really share rows
  plan = packed.plans["eval"]
  assert (0 < plan.num_whole < plan.num_rows) if block else plan.num_whole == plan.num_rows
  ref = _one_batch(padded.predict_batches(padded.eval_features, n))
  got = _one_batch(packed.eval_iterator({}, 2, 0, 1))
  if only_blocks:
    got = _block_rows_only(packed, got)
    ids = np.asarray(got["packed_segment_ids"])  # no document crosses a block boundary
    assert not np.any((ids[:, block - 1:-1:block] == ids[:, block::block])
                      & (ids[:, block::block] > 0))
  ref_out, ref_mid = _outputs(padded, params, ref)
  got_out, got_mid = _outputs(packed, params, got)
  a, b = padded.ordered(ref_out), packed.ordered(got_out)
  if only_blocks:
    a = {k: v[b["feature_index"]] for k, v in a.items()}
  np.testing.assert_array_equal(a["feature_index"], b["feature_index"])
  np.testing.assert_allclose(b["logits"], a["logits"], atol=1e-5, rtol=0)
  # The official metrics from the packed outputs are those of the padded ones.
  if not only_blocks:
    assert packed.host_metrics(got_out) == padded.host_metrics(ref_out)
  # The pooled vector of every example ([CLS] pooler or mean: the classifier's input).
  slots = np.flatnonzero(got["feature_index"] >= 0)
  fi = got["feature_index"][slots]
  np.testing.assert_allclose(got_mid["Dropout_0"]["__call__"][0][slots],
                             ref_mid["Dropout_0"]["__call__"][0][fi], atol=1e-5, rtol=0)
  # The encoder's token outputs of every example at its place in its row.
  seq_ref = ref_mid["bert"]["__call__"][0]["sequence_output"]   # [N, L, hidden]
  seq_got = got_mid["bert"]["__call__"][0]["sequence_output"]   # [R, L, hidden]
  k, lengths = len(got["feature_index"]) // len(got["input_ids"]), ref["input_mask"].sum(1)
  for slot, f in zip(slots, fi):
    start = got["example_starts"][slot]
    np.testing.assert_allclose(seq_got[slot // k, start:start + lengths[f]],
                               seq_ref[f, :lengths[f]], atol=1e-5, rtol=0)


@pytest.mark.parametrize("block", [0, 16])
def test_packed_training_batch_has_the_padded_gradients(pair_tasks, block):
  padded, packed, params = pair_tasks("cls", block)
  assert not np.allclose(padded.class_weights, 1.0)  # inverse_frequency of 6/6/12
  n = len(padded.train_features["input_ids"])
  ref = next(padded.train_iterator({}, n, 0, 1, seed=0))  # epoch 0, every example once
  got = next(packed.train_iterator({}, packed.plans["train"].num_rows, 0, 1, seed=0))
  assert sorted(got["feature_index"][got["feature_index"] >= 0]) == list(range(n))
  loss_ref, grads_ref = _loss_and_grads(padded, params, ref)
  loss_got, grads_got = _loss_and_grads(packed, params, got)
  assert float(loss_got) == pytest.approx(float(loss_ref), abs=1e-5)
  for (path, g), r in zip(jax.tree_util.tree_flatten_with_path(grads_got)[0],
                          jax.tree_util.tree_leaves(grads_ref)):
    np.testing.assert_allclose(g, r, atol=1e-5, rtol=0, err_msg=jax.tree_util.keystr(path))


# ----------------------------------------------------------------- exactness: NER
@pytest.mark.parametrize("block", [0, 16])
def test_packed_ner_equals_padded(ner_file, block):
  padded, packed = _task("ner", False, ner_file), _task("ner", True, ner_file,
                                                         packing_block=block)
  params = _params(padded)
  n = len(padded.eval_features["input_ids"])
  ref = _one_batch(padded.predict_batches(padded.eval_features, n))
  got = _one_batch(packed.eval_iterator({}, 2, 0, 1))
  if block:
    assert packed.plans["eval"].num_whole < packed.plans["eval"].num_rows
  ref_logits = _logits(padded, params, ref)                 # [N, L, C]
  got_logits = _logits(packed, params, got)                 # [R, L, C]
  k = got["feature_index"].shape[0] // got["input_ids"].shape[0]
  lengths = ref["input_mask"].sum(1)
  for slot in np.flatnonzero(got["feature_index"] >= 0):
    f, start = got["feature_index"][slot], got["example_starts"][slot]
    np.testing.assert_allclose(got_logits[slot // k, start:start + lengths[f]],
                               ref_logits[f, :lengths[f]], atol=1e-5, rtol=0)
  # seqeval's F1 (and per type) of the packed predictions, mapped back to words.
  outs = [{k_: np.asarray(v) for k_, v in t.predict_outputs({"logits": logits}, b).items()}
          for t, b, logits in ((padded, ref, ref_logits), (packed, got, got_logits))]
  assert packed.host_metrics(outs[1]) == padded.host_metrics(outs[0])
  # The loss over the same tokens: equal (token-weighted, not row-weighted).
  loss_ref, loss_got = (t.loss_parts({"logits": x}, b)["task"] / t.loss_weights(b)["task"]
                        for t, b, x in ((padded, ref, ref_logits), (packed, got, got_logits)))
  assert float(loss_got) == pytest.approx(float(loss_ref), abs=1e-5)


def test_packed_batch_layout():
  """Two examples of 3 and 2 tokens in a row of 8: tokens back to back, positions from 0,
  segments 1 and 2, [CLS] starts 0 and 3, the empty slot weightless."""
  features = {"input_ids": np.array([[5, 6, 7, 0], [8, 9, 0, 0]], np.int32),
              "input_mask": np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.int32),
              "segment_ids": np.array([[0, 0, 0, 0], [0, 1, 0, 0]], np.int32),
              "labels": np.array([1, 0], np.int32)}
  plan = packing.PackPlan(features, 8, 3)
  batch = packing.rows_of(features, plan.members(np.arange(2)), plan.lengths, 8)
  np.testing.assert_array_equal(batch["input_ids"], [[5, 6, 7, 8, 9, 0, 0, 0]])
  np.testing.assert_array_equal(batch["segment_ids"], [[0, 0, 0, 0, 1, 0, 0, 0]])
  np.testing.assert_array_equal(batch["positions"], [[0, 1, 2, 0, 1, 0, 0, 0]])
  np.testing.assert_array_equal(batch["packed_segment_ids"], [[1, 1, 1, 2, 2, 0, 0, 0]])
  np.testing.assert_array_equal(batch["input_mask"], [[1, 1, 1, 1, 1, 0, 0, 0]])
  np.testing.assert_array_equal(batch["example_starts"], [0, 3, 0])
  np.testing.assert_array_equal(batch["feature_index"], [0, 1, -1])
  np.testing.assert_array_equal(batch["example_weight"], [1, 1, 0])
  np.testing.assert_array_equal(batch["labels"], [1, 0, 0])


def test_rows_in_blocks_layout():
  """Lengths 6, 3, 3, 2, 2, 1 in rows of 8, blocks of 4, at most 4 a row (2 a block):
  the 6 opens a whole row and a 2 fills it; the rest go into blocks by first-fit
  decreasing (3+1 | 3 | 2), two blocks a row, each example within its block."""
  lengths = np.array([2, 6, 3, 1, 3, 2])
  features = {"input_ids": (np.arange(8)[None] < lengths[:, None]).astype(np.int32) * 7,
              "labels": np.arange(6, dtype=np.int32)}
  features["input_mask"] = (features["input_ids"] > 0).astype(np.int32)
  plan = packing.PackPlan(features, 8, 4, block=4)
  assert (plan.num_rows, plan.num_whole) == (3, 1)
  batch = packing.rows_of(features, plan.members(np.arange(6)), plan.lengths, 8,
                          plan.rank_starts)
  np.testing.assert_array_equal(batch["packed_segment_ids"], [[1, 1, 1, 1, 1, 1, 2, 2],
                                                              [1, 1, 1, 2, 3, 3, 3, 0],
                                                              [1, 1, 0, 0, 0, 0, 0, 0]])
  np.testing.assert_array_equal(batch["positions"][1], [0, 1, 2, 0, 0, 1, 2, 0])
  np.testing.assert_array_equal(batch["example_starts"].reshape(3, 4),
                                [[0, 6, 0, 0], [0, 3, 4, 0], [0, 0, 0, 0]])
  lens = plan.lengths[batch["feature_index"].reshape(3, 4)]
  np.testing.assert_array_equal(np.where(batch["example_weight"].reshape(3, 4) > 0, lens, 0),
                                [[6, 2, 0, 0], [3, 1, 3, 0], [2, 0, 0, 0]])


def test_rows_in_blocks_hold_every_example_once_and_batch_apart():
  """500 lengths of 1..64 in rows of 64, blocks of 32: every example once, no example in
  a row in blocks across its boundary, the whole rows first, each holding an example
  longer than a block; an epoch's batches hold every row once, at most one mixing the
  two kinds, and the epoch's order is new every epoch."""
  rng = np.random.default_rng(0)
  lengths = np.minimum(rng.lognormal(3.0, 0.5, 500).astype(int) + 1, 64)
  features = {"input_mask": (np.arange(64)[None] < lengths[:, None]).astype(np.int32)}
  plan = packing.PackPlan(features, 64, 8, block=32)
  assert 0 < plan.num_whole < plan.num_rows and plan.fill > 0.9
  members = plan.epoch_members(0, 0)
  real = members >= 0
  assert sorted(members[real].tolist()) == list(range(500))
  lens = np.where(real, lengths[np.maximum(members, 0)], 0)
  starts, ends = plan.rank_starts, plan.rank_starts + lens
  assert np.all(ends <= 64) and np.all(np.diff(np.where(real, starts, 64), axis=1)[
      real[:, 1:]] > 0)  # slots in token order, none overlapping
  blocked = np.arange(plan.num_rows) >= plan.num_whole
  assert np.all((starts // 32 == (ends - 1) // 32)[blocked[:, None] & real])
  assert np.all(lens[~blocked].max(1) > 32)
  assert np.all(real[blocked].sum(1) <= 8)
  tables = [plan.epoch_batches(0, e, 16) for e in (0, 1)]
  for table in tables:
    assert sorted(table[table >= 0].tolist()) == list(range(plan.num_rows))
    kinds = [set((r[r >= 0] >= plan.num_whole).tolist()) for r in table]
    assert sum(len(k) > 1 for k in kinds) <= 1
  assert not np.array_equal(tables[0], tables[1])


def test_the_start_up_line_says_what_a_step_of_this_data_holds():
  """30 examples of 8 tokens fill 2 rows of 128 (16 and 14): a step of 8 rows holds the
  30, not 8 rows x 15 = "~120 examples a step" as it said. 100 examples of 32 tokens fill
  25 rows (4 a row): 4 steps of 8 rows an epoch, 25 examples a step, not 8 x 4 = 32."""
  def plan(n, length):
    mask = (np.arange(128)[None] < np.full((n, 1), length)).astype(np.int32)
    return packing.PackPlan({"input_mask": mask}, 128, 16)
  small = plan(30, 8)
  assert small.num_rows == 2
  assert small.summary(8).endswith(
      "15.00 examples a row, a step of 8 rows holds all 30 examples in its first 2 rows, "
      "the other 6 empty")
  large = plan(100, 32)
  assert (large.num_rows, large.batches_per_epoch(8)) == (25, 4)
  assert large.summary(8).endswith(
      "4.00 examples a row, ~25 examples a step of 8 rows (4 steps an epoch)")
