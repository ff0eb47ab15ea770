"""SQuAD featurization (windows, answer positions) and post-processing back to text."""
import numpy as np
import pytest

from bert_jax.tasks.finetune.squad import features as squad
from bert_jax.tasks.finetune.squad import metrics as squad_metrics
from bert_jax.tasks.finetune.squad.features import Answer, SquadExample
from bert_jax.tasks.finetune.squad.postprocess import postprocess_squad

SHANGHAI = ("Shanghai is a City in China, it is also a financial center, its fashion "
            "capital and industrial city.")


def peaked_logits(features, starts, ends, peak=10.0, seed=0):
  """[F, L] small random logits with `peak` at the given per-feature positions."""
  rng = np.random.default_rng(seed)
  s = rng.normal(0, 0.1, features["input_ids"].shape)
  e = rng.normal(0, 0.1, features["input_ids"].shape)
  for f, (i, j) in enumerate(zip(starts, ends)):
    if i is not None:
      s[f, i] += peak
      e[f, j] += peak
  return s, e


def test_shanghai_answer_positions_and_exact_text(tokenizer):
  ex = SquadExample("q1", "What is the fashion capital of China?", SHANGHAI,
                    (Answer("Shanghai", 0),))
  f, log = squad.featurize_squad([ex], tokenizer, max_seq_length=64, is_training=True)
  assert log.kept == 1 and len(f["example_index"]) == 1
  tokens = [tokenizer.id_to_token(int(i)) for i in f["input_ids"][0]]
  # [CLS] what is the fashion capital of china ? [SEP] shanghai ...
  assert tokens[:11] == ["[CLS]", "what", "is", "the", "fashion", "capital", "of", "china",
                         "?", "[SEP]", "shanghai"]
  assert (f["start_positions"][0], f["end_positions"][0]) == (10, 10)
  assert f["offsets"][0, 10].tolist() == [0, 8]
  assert (f["offsets"][0, :10] == -1).all()  # [CLS], question, [SEP]: not context
  n = int(f["input_mask"][0].sum())
  assert tokens[n - 1] == "[SEP]" and f["segment_ids"][0, :n].tolist() == [0] * 10 + [1] * (n - 10)
  assert f["offsets"][0, n - 2].tolist() == [len(SHANGHAI) - 1, len(SHANGHAI)]  # the "."
  assert {k: (v.shape, v.dtype.name) for k, v in f.items()} == {
      "input_ids": ((1, 64), "int32"), "input_mask": ((1, 64), "int32"),
      "segment_ids": ((1, 64), "int32"), "offsets": ((1, 64, 2), "int32"),
      "token_is_max_context": ((1, 64), "bool"), "example_index": ((1,), "int32"),
      "start_positions": ((1,), "int32"), "end_positions": ((1,), "int32")}

  s, e = peaked_logits(f, [10], [10])
  preds = postprocess_squad([ex], f, s, e)
  assert preds.texts == {"q1": "Shanghai"}
  assert preds.nbest["q1"][0]["probability"] > 0.99
  assert squad_metrics.squad_v1_scores({"q1": ["Shanghai"]}, preds.texts)["exact_match"] == 100


def test_doc_spans_never_leave_a_gap():
  assert squad.doc_spans(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
  assert squad.doc_spans(10, 4, 6) == [(0, 4), (4, 4), (8, 2)]  # stride > window
  assert squad.doc_spans(3, 8, 2) == [(0, 3)]
  for n, w, s in [(1, 1, 1), (37, 5, 2), (100, 7, 7), (50, 6, 9)]:
    covered = set()
    for start, length in squad.doc_spans(n, w, s):
      covered.update(range(start, start + length))
    assert covered == set(range(n))


def test_long_context_answer_in_second_window(tokenizer):
  # 80 single-token context words; the answer is context tokens 42-43.
  words = ["blah"] * 80
  words[42:44] = ["hidden", "treasure"]
  context = " ".join(words)
  start = context.index("hidden treasure")
  ex = SquadExample("long", "Where is the treasure?", context, (Answer("hidden treasure", start),))
  # question 5 tokens -> windows of 48 - 5 - 3 = 40 tokens every 16: 0, 16, 32, 48.
  f, log = squad.featurize_squad([ex], tokenizer, 48, doc_stride=16, max_query_length=16,
                                 is_training=True)
  assert len(f["example_index"]) == 4 and log.notes["multi_window"] == 1
  # Every context token is in at least one window.
  all_offsets = {tuple(o) for o in tokenizer.encode(context, add_special_tokens=False).offsets}
  seen = {tuple(o) for o in f["offsets"].reshape(-1, 2).tolist() if o[0] >= 0}
  assert seen == all_offsets and len(all_offsets) == 80
  # Window 0 (tokens 0-39) lacks the answer -> [CLS]; windows 1 and 2 contain it.
  prefix = 7  # [CLS] + 5 question tokens + [SEP]
  assert f["start_positions"].tolist() == [0, 42 - 16 + prefix, 42 - 32 + prefix, 0]
  assert f["end_positions"].tolist() == [0, 43 - 16 + prefix, 43 - 32 + prefix, 0]
  # Token 42 has more context in window 1 (13 tokens each side at least) than in 2 (10).
  assert f["token_is_max_context"][1, 42 - 16 + prefix]
  assert not f["token_is_max_context"][2, 42 - 32 + prefix]

  # A model peaking on the answer in windows 1 and 2 and on a wrong span in window 0.
  s, e = peaked_logits(f, [3 + prefix, 42 - 16 + prefix, 42 - 32 + prefix, None],
                       [4 + prefix, 43 - 16 + prefix, 43 - 32 + prefix, None])
  s[0, 3 + prefix] -= 1.0  # the decoy scores lower than the answer
  preds = postprocess_squad([ex], f, s, e)
  assert preds.texts["long"] == "hidden treasure"
  texts = [c["text"] for c in preds.nbest["long"]]
  assert texts.count("hidden treasure") == 1 and "blah blah" in texts  # deduplicated


def test_accents_and_extra_spaces_map_to_exact_original_chars(tokenizer):
  context = "Le  café   Müller est à Paris."
  ex = SquadExample("acc", "Who runs the café?", context,
                    (Answer("café   Müller", context.index("café")),))
  f, _ = squad.featurize_squad([ex], tokenizer, 32, is_training=True)
  tokens = [tokenizer.id_to_token(int(i)) for i in f["input_ids"][0]]
  s_pos, e_pos = int(f["start_positions"][0]), int(f["end_positions"][0])
  assert tokens[s_pos:e_pos + 1] == ["cafe", "muller"]  # normalized WordPieces...
  s, e = peaked_logits(f, [s_pos], [e_pos])
  # ...but the answer is the original text, accents, capitals and three spaces included.
  assert postprocess_squad([ex], f, s, e).texts["acc"] == "café   Müller"


def test_version_2_null_answer_and_threshold(tokenizer):
  ex = SquadExample("imp", "What is the capital of Mars?", SHANGHAI, (), is_impossible=True)
  f, log = squad.featurize_squad([ex], tokenizer, 64, is_training=True)
  assert (f["start_positions"][0], f["end_positions"][0]) == (0, 0) and log.kept == 1
  s, e = peaked_logits(f, [0], [0], peak=5.0)  # [CLS]: null score ~10
  at = int(np.flatnonzero(f["offsets"][0, :, 0] == 0)[0])  # the token "shanghai"
  s[0, at] += 4.0  # best span "Shanghai" scores ~8
  e[0, at] += 4.0
  preds = postprocess_squad([ex], f, s, e, version_2=True)
  assert preds.texts["imp"] == ""
  assert preds.null_score_diff["imp"] == pytest.approx(2.0, abs=0.5)
  assert preds.nbest["imp"][0]["text"] == "" and preds.nbest["imp"][0]["char_start"] == -1
  preds = postprocess_squad([ex], f, s, e, version_2=True, null_score_diff_threshold=5.0)
  assert preds.texts["imp"] == "Shanghai"


def test_postprocess_respects_span_rules(tokenizer):
  ex = SquadExample("r", "What is the fashion capital of China?", SHANGHAI)
  f, _ = squad.featurize_squad([ex], tokenizer, 64)
  assert "start_positions" not in f  # eval features carry no labels
  # Context tokens from position 10: shanghai(10) is(11) a(12) city(13) in(14) china(15)
  s, e = peaked_logits(f, [12], [10])  # the best end lies before the best start
  s[0, 3] += 20.0  # a question token: never an answer start
  e[0, 13] += 1.0  # so the best valid span is 12..13
  e[0, 12] += 0.5  # and the best one-token span 12..12
  preds = postprocess_squad([ex], f, s, e)
  assert preds.texts["r"] == "a City"
  assert all(c["char_start"] >= 0 for c in preds.nbest["r"])
  preds = postprocess_squad([ex], f, s, e, max_answer_length=1)
  assert preds.texts["r"] == "a"
  assert all(len(c["text"].split()) == 1 for c in preds.nbest["r"])


def test_bad_answers_are_counted_and_skipped_in_training(tokenizer):
  long_answer_ctx = " ".join(["blah"] * 30)
  exs = [
      SquadExample("ok", "Where?", SHANGHAI, (Answer("China", SHANGHAI.index("China")),)),
      SquadExample("shifted", "Where?", SHANGHAI, (Answer("China", 3),)),
      SquadExample("absent", "Where?", SHANGHAI, (Answer("Beijing", 0),)),
      SquadExample("noq", "  ", SHANGHAI, (Answer("Shanghai", 0),)),
      SquadExample("noans", "Where?", SHANGHAI, ()),
      SquadExample("long", "Where?", long_answer_ctx, (Answer(long_answer_ctx, 0),)),
      SquadExample("second_ok", "Where?", SHANGHAI,
                   (Answer("Beijing", 0), Answer("Shanghai", 0))),  # trains on the 2nd
  ]
  f, log = squad.featurize_squad(exs, tokenizer, 16, doc_stride=4, max_query_length=4,
                                 is_training=True)
  assert sorted(set(f["example_index"].tolist())) == [0, 6]
  assert dict(log.skipped) == {"answer_text_mismatch": 2, "empty_text": 1,
                               "missing_label": 1, "answer_longer_than_window": 1}
  # Evaluation keeps what it can score: only the empty question goes.
  f, log = squad.featurize_squad(exs, tokenizer, 16, doc_stride=4, max_query_length=4)
  assert sorted(set(f["example_index"].tolist())) == [0, 1, 2, 4, 5, 6]
  assert dict(log.skipped) == {"empty_text": 1}


def test_answer_split_across_windows_without_overlap_is_skipped(tokenizer):
  context = " ".join(["blah"] * 8 + ["hidden", "treasure"] + ["blah"] * 8)
  ex = SquadExample("split", "Where?", context,
                    (Answer("hidden treasure", context.index("hidden")),))
  # question 2 tokens -> windows of 14 - 2 - 3 = 9 tokens, stride 9: tokens 8|9 split.
  f, log = squad.featurize_squad([ex], tokenizer, 14, doc_stride=9, is_training=True)
  assert len(f["example_index"]) == 0 and log.skipped["answer_split_across_windows"] == 1
  f, log = squad.featurize_squad([ex], tokenizer, 14, doc_stride=4, is_training=True)
  assert log.kept == 1 and (f["start_positions"] > 0).sum() >= 1
