"""The translation task through the real loop: numbers (offline), tfds mock data, GRU."""
import math

import numpy as np
import pytest

from bert_jax.tasks import registry
from tests.tasks.translation.conftest import translation_config


def test_numbers_run_scores_bleu_and_keeps_the_best_checkpoint(numbers_workdir):
  workdir, result = numbers_workdir
  assert result["step"] == 2
  for key in ("eval/bleu", "eval/chrf", "eval/exact_match", "eval/token_accuracy",
              "eval/perplexity", "eval/forced_exact"):
    assert key in result and math.isfinite(result[key]), key
  assert 0.0 <= result["eval/bleu"] <= 100.0
  # The never-trained-on test split is written for the translate CLI and sacrebleu.
  src = (workdir / "data" / "test.de").read_text(encoding="utf-8").splitlines()
  ref = (workdir / "data" / "test.en").read_text(encoding="utf-8").splitlines()
  assert len(src) == len(ref) == 6 and all(src) and all(ref)
  assert (workdir / "tokenizer" / "tokenizer.json").exists()
  assert (workdir / "checkpoints" / "2").is_dir()


def test_host_metrics_score_decoded_text_against_raw_references(numbers_workdir):
  workdir, _ = numbers_workdir
  task = registry.get_task(translation_config())
  task.prepare(str(workdir))  # reuses the workdir's vocabulary
  refs = task.eval_source.references
  n = len(refs)
  # The references themselves as "hypotheses": BLEU 100, every sentence exact.
  outputs = {"feature_index": np.arange(n)[::-1].copy(),
             "hyp": task.eval_source.tgt_ids[::-1].copy(),
             "nll": np.ones(n), "correct": np.full(n, 3.0), "tokens": np.full(n, 4.0)}
  got = task.host_metrics(outputs)
  assert got["bleu"] == pytest.approx(100.0) and got["exact_match"] == 1.0
  assert got["token_accuracy"] == pytest.approx(0.75)
  assert got["perplexity"] == pytest.approx(math.exp(0.25))
  # Padding rows (feature_index -1) are dropped.
  outputs = {k: np.concatenate([v, v[:1]]) for k, v in outputs.items()}
  outputs["feature_index"][-1] = -1
  assert task.host_metrics(outputs)["exact_match"] == 1.0


def test_gru_baseline_trains_and_decodes_on_the_same_loop(tmp_path):
  config = translation_config("numbers_gru")
  config.decode.eval_beam_size = 1  # greedy in the loop; GRU beam search: test_search.py
  result = registry.run(config, str(tmp_path))
  assert result["step"] == 2 and math.isfinite(result["train/loss"])
  assert 0.0 <= result["eval/bleu"] <= 100.0


def test_ted_hrlr_translate_mock_data_through_the_loop(tmp_path):
  pytest.importorskip("tensorflow")
  tfds = pytest.importorskip("tensorflow_datasets")
  config = translation_config("ted_hrlr_translate/pt_to_en")
  config.data.vocab_size = 300  # random mock text: every character is a token
  with tfds.testing.mock_data(num_examples=16):
    result = registry.run(config, str(tmp_path))
  assert result["step"] == 2 and math.isfinite(result["train/loss"])
  assert "eval/bleu" in result
