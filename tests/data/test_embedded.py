"""The embedded offline corpus (gensim's Wikipedia excerpt + Lee corpus) prepares and loads."""
import numpy as np

from bert_jax.data import loader
from bert_jax.data.prepare import prepare


def test_embedded_corpus_prepares_and_loads(tmp_path, make_config, capsys):
  cfg = make_config(tmp_path, corpus="embedded", text_files="", vocab_size=4000,
                    max_seq_length=128, max_predictions_per_seq=20, dupe_factor=1,
                    validation_fraction=0.02, prepare_processes=0)
  prepared = prepare(cfg)
  out = capsys.readouterr().out
  assert "wiki redirects/empty pages" in out
  corpus = prepared.stats["corpus"]
  assert corpus["documents"] > 350  # ~100 articles + 300 Lee stories
  assert corpus["sentences"] > 20_000 and corpus["validation_documents"] >= 2
  train = prepared.stats["instances"]["train"]
  assert train["tokens"] > 500_000 and train["instances"] > 5000
  assert abs(train["random_next"] / train["instances"] - 0.5) < 0.02
  assert prepared.vocab_size > 3000
  it = loader.make_train_iterator(cfg, prepared, 32, shard_index=0, shard_count=1)
  batch = next(it)
  lengths = batch["input_mask"].sum(1)
  assert (lengths == 128).mean() > 0.5
  text = prepared.tokenizer().decode(batch["input_ids"][0].tolist())
  assert len(text.split()) > 40
  w = batch["masked_lm_weights"]
  assert abs(w.sum() / (lengths - 3).sum() - 0.15) < 0.02
  assert np.isin(batch["masked_lm_ids"][w > 0], list(prepared.special.all)).sum() == 0
