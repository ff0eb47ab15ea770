"""Beam stages whose workers share no disk: a gs:// data_dir on fake-gcs-server.

DirectRunner with 2 worker processes stands in for Dataflow: the workers write their
array_record shards to local temporary files and upload them into the bucket, and read
the documents from copies of their files (data/beam/remote.py); the launcher writes
only metadata and markers and keeps no copy. The bucket's datasets must be the records
of the in-process preparation of the same corpus, and a training host must read them
through the usual copy (data/mirror.py).
"""
import dataclasses
import os

import numpy as np
import tensorflow_datasets as tfds
from bert_jax.data.beam import remote as beam_remote
from bert_jax.data.beam import util as beam_util
from bert_jax.data import mirror
from bert_jax.data import prepare as prepare_lib
from tests.data.test_beam import TWO_WORKERS, config, records, unordered, write_bad_files
from tests.test_gcs import gcs  # noqa: F401  (the fake-gcs-server fixture)


@dataclasses.dataclass(frozen=True)
class ThreeShards(beam_util.BeamRun):
  """Each split in 3 array_record files (tfds's default for a small corpus: 1), so the
  workers read documents across files; tfds orders records by a hash of the key over
  all files, so the records are those of a 1-file build in the same order."""

  def download_config(self):
    return dataclasses.replace(super().download_config(), num_shards=3)


def _files(root) -> list[str]:
  return sorted(os.path.relpath(os.path.join(d, f), root)
                for d, _, names in os.walk(root) for f in names)


def _config(make_config, testdata, data_dir, tmp_path):
  """The bad files and the two fixture texts, in shards of 2 documents."""
  files = ",".join([write_bad_files(str(tmp_path / "corpus")), testdata("tiny_corpus.txt"),
                    testdata("paragraphs.txt")])
  cfg = config(make_config, data_dir, files)
  cfg.shard_documents, cfg.validation_fraction = 2, 0.2
  return cfg


def test_workers_write_the_levels_into_the_bucket(
    gcs, make_config, testdata, tmp_path, monkeypatch):  # noqa: F811
  ref = prepare_lib.prepare(_config(make_config, testdata, tmp_path / "ref", tmp_path),
                            verbose=False)
  assert ref.num_examples["validation"] > 0

  cfg = _config(make_config, testdata, "gs://bucket/beam", tmp_path)
  cfg.cache_dir = str(tmp_path / "launcher")
  uploads = []  # by this process: the launcher
  monkeypatch.setattr(beam_remote, "upload", lambda *a: uploads.append(a))
  monkeypatch.setattr(mirror.Mirror, "_upload", lambda *a: uploads.append(a))
  run = ThreeShards(TWO_WORKERS.runner, TWO_WORKERS.options)
  built, name = prepare_lib.prepare_named(cfg, verbose=False, beam=run)
  assert not uploads
  # Nothing built here: the launcher's cache holds only the per-level build locks.
  assert [f for f in _files(tmp_path / "launcher") if not f.endswith(".lock")] == []
  assert built.instances_dir.startswith(f"gs://bucket/beam/{name}/beam_instances_builder")
  assert built.vocab_path.startswith("gs://bucket/beam/vocab-")
  gcs.invalidate_cache()
  shards = gcs.glob("bucket/beam/*/beam_*_builder/*/*.array_record-*")
  want = [os.fspath(p)[len("gs://"):] for d in (built.documents_dir, built.instances_dir)
          for split in tfds.builder_from_directory(d).info.splits.values()
          for p in split.filepaths]
  assert sorted(shards) == sorted(want)
  docs_info = tfds.builder_from_directory(built.documents_dir).info
  assert len(docs_info.splits["train"].filepaths) == 3  # read across files by the workers
  assert not gcs.glob("bucket/beam/**/incomplete*")

  # A training host: prepare() finds everything done in the bucket, copies the instances
  # and the vocabulary (checked), builds nothing, and the loader reads the copy.
  cfg.cache_dir = str(tmp_path / "trainer")
  got = prepare_lib.prepare(cfg, verbose=False)
  local = tmp_path / "trainer/gs/bucket/beam"
  assert got.instances_dir.startswith(str(local / name))
  assert not [d for d in os.listdir(local) if d.startswith("documents-")]
  assert unordered(records(got.instances_dir)) == unordered(records(ref.instances_dir))
  with open(got.vocab_path, "rb") as f, open(ref.vocab_path, "rb") as g:
    assert f.read() == g.read()
  np.testing.assert_array_equal(got.unigram_counts, ref.unigram_counts)
  assert got.stats["corpus"] == ref.stats["corpus"]
  assert got.stats["instances"]["train"]["instances"] == ref.num_examples["train"]
  level, rest = got.documents_dir[len("gs://bucket/beam/"):].split("/", 1)
  docs = mirror.Mirror(cfg.data_dir, cfg.cache_dir).fetch(level, "corpus_stats.json")
  assert records(os.path.join(docs, rest)) == records(ref.documents_dir)

  # The same command again finds every level complete in the bucket: nothing rebuilt.
  before = {p: gcs.info(p)["generation"] for p in gcs.find("bucket/beam")}
  cfg.cache_dir = str(tmp_path / "launcher")
  assert prepare_lib.prepare_named(cfg, verbose=False, beam=run)[1] == name
  gcs.invalidate_cache()
  assert {p: gcs.info(p)["generation"] for p in gcs.find("bucket/beam")} == before



def test_workers_read_the_corpus_from_the_bucket(gcs, make_config, testdata, tmp_path):  # noqa: F811
  """The corpus in the bucket too, no mount anywhere: text files by a gs:// glob, and a
  Beam-based catalog dataset (as wikipedia/*) that its own Beam workers write into
  gs:// through the same uploading writer. The stages read both from there and give the
  records of the same corpus on local disk."""
  from tests.data.test_beam import IN_MEMORY, FakeBeamWiki  # pylint: disable=g-import-not-at-top
  files = write_bad_files(str(tmp_path / "corpus")).split(",") + [testdata("tiny_corpus.txt")]
  for f in files:
    gcs.put_file(f, f"bucket/corpus/{os.path.basename(f)}")
  common = dict(corpus="tfds", tfds_name="fake_beam_wiki", vocab_size=300, vocab_path=None,
                validation_fraction=0.1, max_line_chars=20000)
  ref = prepare_lib.prepare(make_config(tmp_path / "ref", tfds_data_dir=str(tmp_path / "tfds"),
                                        text_files=",".join(files), **common), verbose=False)
  cfg = make_config("gs://bucket/catalog", tfds_data_dir="gs://bucket/tfds",
                    text_files="gs://bucket/corpus/*.txt", cache_dir=str(tmp_path / "launcher"),
                    **common)
  FakeBeamWiki.runners.clear()
  got = prepare_lib.prepare(cfg, verbose=False, beam=ThreeShards(IN_MEMORY.runner, IN_MEMORY.options))
  assert FakeBeamWiki.runners == ["SwitchingDirectRunner"]  # DirectRunner, Prism ruled out
  gcs.invalidate_cache()
  assert len(gcs.glob("bucket/tfds/fake_beam_wiki/*/fake_beam_wiki-train.array_record-*")) == 3
  assert got.stats["corpus"] == ref.stats["corpus"] and got.stats["corpus"]["files"] == 5
  cfg.cache_dir = str(tmp_path / "trainer")
  read = prepare_lib.prepare(cfg, verbose=False)  # copies what the bucket holds
  assert unordered(records(read.instances_dir)) == unordered(records(ref.instances_dir))
  with open(read.vocab_path, "rb") as f, open(ref.vocab_path, "rb") as g:
    assert f.read() == g.read()
