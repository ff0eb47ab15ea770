"""data/prepare.py on the fixture corpus: caching by config hash, summaries, bad input,
clear errors, the same data whatever the number of worker processes."""
import json
import multiprocessing
import os

import numpy as np
import pytest

from bert_jax.data import loader
from bert_jax.data.mirror import CorruptDataError
from bert_jax.data.prepare import prepare
from bert_jax.data.tokenizer import SpecialIds


def test_prepare_is_idempotent_and_config_hashed(tiny, make_config, data_root, google_vocab,
                                                 capsys):
  cfg, prepared = tiny
  again = prepare(cfg)  # reuses: prints the summary, builds nothing
  assert again.instances_dir == prepared.instances_dir
  out = capsys.readouterr().out
  assert "8 documents" in out and "Downloading" not in out
  assert prepared.num_examples["train"] > 100 and prepared.num_examples["validation"] > 10
  assert prepared.special == SpecialIds(0, 100, 101, 102, 103)
  counts = prepared.unigram_counts
  assert counts.shape == (30522,) and counts[list(prepared.special.all)].sum() == 0
  assert counts.sum() == prepared.stats["instances"]["train"]["tokens"]
  assert counts[prepared.tokenizer().token_to_id("the")] >= 20
  other = prepare(make_config(data_root, max_seq_length=48,  # an HF tokenizer dir
                                     vocab_path=os.path.dirname(google_vocab)),
                         verbose=False)
  assert other.instances_dir != prepared.instances_dir
  assert other.documents_dir == prepared.documents_dir  # documents reused
  # No vocab_path: one is trained, saved under data_dir, and reused by the next prepare.
  trained = prepare(make_config(data_root), verbose=False)
  assert trained.vocab_path.startswith(str(data_root)) and trained.special.all == (0, 1, 2, 3, 4)
  reused = prepare(make_config(data_root), verbose=False)
  assert (reused.vocab_path, reused.instances_dir) == (trained.vocab_path, trained.instances_dir)


def test_bad_input_is_counted_in_the_summary(data_root, make_config, testdata, capsys):
  files = ",".join(testdata(n) for n in ("bad_bytes.txt", "empty.txt", "tiny_corpus.txt"))
  cfg = make_config(data_root / "bad", text_files=files, max_line_chars=70,
                    validation_fraction=0.0)
  prepared = prepare(cfg)
  out = capsys.readouterr().out
  assert "2 non-UTF-8 lines (replaced)" in out and "1 empty files" in out
  assert "1 one-sentence documents" in out
  corpus = prepared.stats["corpus"]
  assert corpus["truncated_lines"] == 3 and corpus["train_documents"] == 8
  assert prepared.num_examples["validation"] == 0
  with pytest.raises(ValueError, match="No validation instances"):
    loader.make_eval_iterator(cfg, prepared, 4, shard_index=0, shard_count=1)


def test_a_validation_split_too_small_to_exist_is_dropped(data_root, make_config,
                                                         google_vocab):
  # A fraction > 0 that no document hashes under: tfds refuses the empty split, so the
  # documents are rebuilt with "train" only, and the instances follow.
  cfg = make_config(data_root / "no_val", validation_fraction=1e-12, vocab_path=google_vocab)
  prepared = prepare(cfg, verbose=False)
  assert prepared.num_examples == {"train": prepared.num_examples["train"], "validation": 0}
  assert prepared.stats["corpus"]["train_documents"] == 8
  assert not list((data_root / "no_val").glob("*/validation-*.jsonl"))  # spill cleaned up


def test_clear_errors(data_root, make_config, testdata):
  with pytest.raises(FileNotFoundError, match="missing_corpus"):
    prepare(make_config(data_root, text_files="/nonexistent/missing_corpus*.txt"))
  with pytest.raises(ValueError, match="no non-empty training document"):
    prepare(make_config(data_root / "empty", text_files=testdata("empty.txt")))
  with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[CLS\], \[SEP\], \[MASK\]"):
    prepare(make_config(data_root, vocab_path=testdata("vocab_no_specials.txt")))
  with pytest.raises(ValueError, match="mode='bert'"):
    prepare(make_config(data_root, mode="bert"))
  with pytest.raises(ValueError, match="corpus='tfds' needs config.tfds_name"):
    prepare(make_config(data_root, corpus="tfds"))


def test_processes_do_not_change_the_prepared_data(tmp_path, make_config, google_vocab):
  # Shards of 3 documents: the fixture's 8 make 3 train tasks for 2 spawned workers.
  prepared = [prepare(make_config(tmp_path / str(p), prepare_processes=p,
                                         shard_documents=3, vocab_path=google_vocab),
                             verbose=False) for p in (1, 2)]
  a, b = (loader.InstanceSource(p.instances_dir, "train") for p in prepared)
  assert len(a) == len(b) > 100
  for i in range(len(a)):
    np.testing.assert_array_equal(a[i][0], b[i][0])
  np.testing.assert_array_equal(prepared[0].unigram_counts, prepared[1].unigram_counts)


def _prepare_in_child(cfg_json, queue):
  import ml_collections  # pylint: disable=g-import-not-at-top
  cfg = ml_collections.ConfigDict(json.loads(cfg_json))
  p = prepare(cfg, verbose=False)
  queue.put((p.instances_dir, p.vocab_path, p.num_examples["train"]))


def test_two_runs_preparing_one_data_dir_at_once_build_it_once(tmp_path, make_config):
  """Two processes (two hosts on a shared filesystem) prepare the same data_dir together,
  vocabulary training included: both get the same finished data, no partial files."""
  cfg = make_config(tmp_path)
  ctx = multiprocessing.get_context("spawn")
  queue = ctx.Queue()
  procs = [ctx.Process(target=_prepare_in_child, args=(cfg.to_json(), queue))
           for _ in range(2)]
  for p in procs:
    p.start()
  got = [queue.get(timeout=300) for _ in procs]
  for p in procs:
    p.join(timeout=60)
    assert p.exitcode == 0
  assert got[0] == got[1] and got[0][2] > 100
  leftovers = [str(f) for f in tmp_path.rglob("*")
               if f.name.endswith(".tmp") or f.name.startswith("incomplete.")]
  assert not leftovers, leftovers
  # One vocabulary was trained (the second process reused it, not a rival build).
  assert len(list(tmp_path.glob("vocab-*/vocab.txt"))) == 1


def test_a_truncated_or_deleted_shard_is_named_at_start_up(tmp_path, make_config,
                                                           google_vocab):
  cfg = make_config(tmp_path, vocab_path=google_vocab)
  prepared = prepare(cfg, verbose=False)
  (shard,) = [f for f in os.listdir(prepared.instances_dir) if "-train.array_record" in f]
  path = os.path.join(prepared.instances_dir, shard)
  os.truncate(path, os.path.getsize(path) // 2)  # array_record alone: 0 records or an error
  with pytest.raises(CorruptDataError, match=rf"{shard} (holds 0 records|cannot be read).*"
                                             r"dataset_info.json counts \d+.*rm -rf "):
    prepare(cfg, verbose=False)
  os.remove(path)
  with pytest.raises(CorruptDataError, match=rf"{shard} is missing"):
    prepare(cfg, verbose=False)


def test_open_prepared_reads_what_prepare_named_and_never_builds(tiny, data_root, tmp_path):
  """What the other hosts of a pod do (data/hosts.py): open the directory process 0 named.
  On a data_dir that does not hold it (local disks, not shared) it is one clear error,
  never a build of its own."""
  from bert_jax.data import prepare as prepare_lib
  from bert_jax.data import prepared_data
  cfg, prepared = tiny
  again, name = prepare_lib.prepare_named(cfg, verbose=False)
  assert again.instances_dir == prepared.instances_dir and name.startswith("nsp-")
  opened = prepared_data.open_prepared(cfg, name, verbose=False)
  assert (opened.instances_dir, opened.vocab_path, opened.num_examples) == (
      prepared.instances_dir, prepared.vocab_path, prepared.num_examples)
  np.testing.assert_array_equal(opened.unigram_counts, prepared.unigram_counts)
  cfg = cfg.copy_and_resolve_references()
  cfg.data_dir = str(tmp_path / "another_host")
  with pytest.raises(FileNotFoundError, match=rf"another_host/{name}/prepared.json does not "
                     r"exist: .* data.data_dir must be a gs:// url or a gcsfuse mount"):
    prepared_data.open_prepared(cfg, name, verbose=False)
  assert not any(os.path.isdir(p) for p in (tmp_path / "another_host").iterdir())
