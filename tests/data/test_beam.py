"""The preparation as Beam pipelines (DirectRunner) against the in-process path.

One corpus, half the embedded one's articles cut to their first 60 sentences (~0.56 MB)
plus text files holding bad input, is prepared three times: in process, on Beam's
DirectRunner with 2 worker processes, and on Beam in memory. Every stage's output must be
the same bytes; the instances must have the loader statistics of google-research/bert
(15% of candidates masked, 80/10/10, NSP 50%).
"""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow_datasets as tfds

from bert_jax.data.beam import util as beam_util
from bert_jax.data import corpora
from bert_jax.data import documents_builder
from bert_jax.data import loader
from bert_jax.data import prepare as prepare_lib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TWO_WORKERS = beam_util.BeamRun(
    "DirectRunner", "--direct_running_mode=multi_processing --direct_num_workers=2")
IN_MEMORY = beam_util.BeamRun("DirectRunner", "--direct_running_mode=in_memory")


def write_bad_files(folder) -> str:
  """Text files with every kind of bad input; their comma-separated paths."""
  os.makedirs(folder, exist_ok=True)
  files = {
      "a.txt": (b"First sentence here. Second one follows.\nA third line.\n\n"
                b"Bad bytes \xff\xfe in this line. And more text.\n\n\n\n")
               + b"x" * 25000 + b" A giant line.\n\nLast document. It ends.\n",
      "b.txt": b"",  # an empty file
      "c.txt": b"\n\n   \n",  # blank lines only
      "d.txt": b"One more document. With two sentences.\n\nAnd \xc3\x28 another one here.\n",
  }
  for name, data in files.items():
    with open(os.path.join(folder, name), "wb") as f:
      f.write(data)
  return ",".join(os.path.join(folder, n) for n in sorted(files))


def config(make_config, data_dir, text_files):
  return make_config(data_dir, corpus="text", text_files=text_files, vocab_size=600,
                     max_seq_length=64, dupe_factor=2, shard_documents=48,
                     validation_fraction=0.05, max_line_chars=20000, vocab_path=None)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """The embedded corpus written as text files (one per source, bert format) plus the bad
  files: over several files, so Beam has sources to spread.

  Each article cut to its first 60 sentences: the same 200 train documents (what spreads
  Beam's work) with 29% of the text (~0.56 MB, was 1.9 MB), still 5,236 train instances
  (> 4000 asserted below); every path's preparation runs on a third of the tokens."""
  import collections  # pylint: disable=g-import-not-at-top
  from bert_jax.data import corpora  # pylint: disable=g-import-not-at-top
  folder = tmp_path_factory.mktemp("corpus")
  files = write_bad_files(str(folder)).split(",")
  docs = list(corpora.embedded_documents(collections.Counter()))
  for part in range(3):  # half the embedded corpus's articles
    path = str(folder / f"embedded-{part}.txt")
    with open(path, "w", encoding="utf-8") as f:
      f.write("\n\n".join("\n".join(d[:60]) for d in docs[part::6]) + "\n")
    files.append(path)
  return ",".join(files)


@pytest.fixture(scope="module")
def prepared(corpus, make_config, tmp_path_factory):
  """{path name: (config, PreparedData)} of the three preparations."""
  out = {}
  for name, run in (("in_process", None), ("two_workers", TWO_WORKERS),
                    ("in_memory", IN_MEMORY)):
    cfg = config(make_config, tmp_path_factory.mktemp(name), corpus)
    out[name] = cfg, prepare_lib.prepare(cfg, verbose=False, beam=run)
  return out


def records(dataset_dir):
  """split -> the records of a dataset, in order: documents as stored bytes; instances
  decoded (a tf.Example's feature map serializes in no fixed order)."""
  builder = tfds.builder_from_directory(dataset_dir)
  if "text" in builder.info.features:
    return {split: [bytes(r) for r in builder.as_data_source(
        split=split, deserialize_method=tfds.decode.DeserializeMethod.RAW_BYTES)]
            for split in builder.info.splits}
  out = {}
  for split in builder.info.splits:
    source = loader.InstanceSource(dataset_dir, split)
    out[split] = [(a.tobytes(), b.tobytes(), c) for a, b, c in (
        source[i] for i in range(len(source)))]
  return out


def unordered(by_split):
  """split -> its records sorted: the instances of Beam and of the in-process path are the
  same records, not in the same order (data/beam/instances.py)."""
  return {split: sorted(recs) for split, recs in by_split.items()}


def test_each_stage_gives_the_same_bytes_in_process_and_on_beam(prepared):
  ref_cfg, ref = prepared["in_process"]
  ref_docs, ref_instances = records(ref.documents_dir), records(ref.instances_dir)
  with open(ref.vocab_path, "rb") as f:
    ref_vocab = f.read()
  assert len(ref_docs["train"]) > 190 and len(ref_docs["validation"]) > 5
  assert len(ref_instances["train"]) > 4000
  for name in ("two_workers", "in_memory"):
    cfg, got = prepared[name]
    assert "beam_" in got.instances_dir and "beam_" in got.documents_dir  # Beam built them
    assert records(got.documents_dir) == ref_docs, name
    with open(got.vocab_path, "rb") as f:
      assert f.read() == ref_vocab, name
    assert unordered(records(got.instances_dir)) == unordered(ref_instances), name
    np.testing.assert_array_equal(got.unigram_counts, ref.unigram_counts)
    assert got.stats["corpus"] == ref.stats["corpus"], name
    assert got.stats["instances"] == ref.stats["instances"], name
  # Two Beam runs (2 worker processes, in memory): the same files, record for record.
  runs = [prepared[name][1].instances_dir for name in ("two_workers", "in_memory")]
  assert records(runs[0]) == records(runs[1])
  infos = [tfds.builder_from_directory(d).info.splits for d in runs]
  for split in ("train", "validation"):
    assert infos[0][split].shard_lengths == infos[1][split].shard_lengths
  assert len(infos[0]["train"].shard_lengths) > 1  # one file per few shards, by the workers


def test_bad_input_is_counted_and_skipped(prepared):
  cfg, got = prepared["two_workers"]
  c = got.stats["corpus"]
  # a.txt: one non-UTF-8 line, one line over 20,000 characters; d.txt another bad line;
  # b.txt empty, c.txt blank lines only: two files without a document.
  assert c["non_utf8_lines"] == 2 and c["truncated_lines"] == 1
  assert c["empty_files"] == 2 and c["files"] == 7
  root = os.path.dirname(os.path.dirname(got.documents_dir))
  with open(os.path.join(root, "corpus_stats.json")) as f:
    assert json.load(f)["stats"] == c
  texts = [r.decode("utf-8", "replace") for r in records(got.documents_dir)["train"]]
  assert not any("x" * 20001 in t for t in texts)


def test_every_document_is_used_and_the_statistics_hold(prepared):
  cfg, got = prepared["in_memory"]
  c, inst = got.stats["corpus"], got.stats["instances"]
  for split in ("train", "validation"):
    assert (inst[split]["documents"] + inst[split].get("documents_empty_after_tokenization", 0)
            == c[split + "_documents"])
  assert got.unigram_counts.sum() == inst["train"]["tokens"]
  # NSP labels over every stored pair: a fair coin.
  source = loader.InstanceSource(got.instances_dir, "train")
  labels = np.array([source[i][2] for i in range(len(source))])
  assert abs(labels.mean() - 0.5) < 0.02
  # Masking as the loader does it for training.
  it = loader.make_train_iterator(cfg, got, 64, shard_index=0, shard_count=1)
  chosen = candidates = as_mask = kept = 0
  mask_id = got.special.mask
  for _ in range(40):
    batch = next(it)
    w = batch["masked_lm_weights"] > 0
    lengths = batch["input_mask"].sum(1)
    chosen += w.sum()
    candidates += (lengths - 3).sum()  # [CLS] and two [SEP]
    rows = np.repeat(np.arange(len(w)), w.sum(1))
    seen = batch["input_ids"][rows, batch["masked_lm_positions"][w]]
    as_mask += (seen == mask_id).sum()
    kept += (seen == batch["masked_lm_ids"][w]).sum()
  assert abs(chosen / candidates - 0.15) < 0.01
  assert abs(as_mask / chosen - 0.8) < 0.02 and abs(kept / chosen - 0.1) < 0.015


def test_preparing_in_process_reuses_what_beam_built(prepared):
  """Training prepares on demand in process: it must find the Beam build done."""
  cfg, got = prepared["in_memory"]
  done = os.path.join(os.path.dirname(os.path.dirname(got.instances_dir)), "prepared.json")
  before = sorted(os.listdir(cfg.data_dir)), os.stat(done).st_mtime_ns
  again = prepare_lib.prepare(cfg, verbose=False)
  assert again.instances_dir == got.instances_dir
  assert (sorted(os.listdir(cfg.data_dir)), os.stat(done).st_mtime_ns) == before


_KILLED = "prepared.json"


def test_a_killed_beam_preparation_reruns_to_the_same_dataset(tmp_path, make_config):
  """SIGKILL during the instances pipeline: nothing is marked complete, and the rerun of the
  same command gives the records of an in-process preparation."""
  files = write_bad_files(str(tmp_path / "corpus"))
  from tests.data.conftest import _TESTDATA  # pylint: disable=g-import-not-at-top
  files += f",{_TESTDATA}/tiny_corpus.txt,{_TESTDATA}/paragraphs.txt"
  cfg = config(make_config, tmp_path / "beam", files)
  cfg.shard_documents = 2
  command = [sys.executable, "-m", "bert_jax.prepare", "--config=configs/bert_tiny.py",
             "--beam_runner=DirectRunner", "--beam_options=--direct_running_mode=in_memory"]
  command += [f"--config.data.{k}={cfg[k]}" for k in (
      "corpus", "text_files", "data_dir", "vocab_size", "max_seq_length", "dupe_factor",
      "shard_documents", "validation_fraction", "max_line_chars")]
  env = dict(os.environ, PYTHONPATH=ROOT)
  child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
  deadline = time.time() + 120
  while time.time() < deadline and not list((tmp_path / "beam").glob("nsp-*/*/incomplete.*")):
    time.sleep(0.05)
  child.send_signal(signal.SIGKILL)
  child.wait()
  assert list((tmp_path / "beam").glob("nsp-*")), "the instances stage never started"
  assert not list((tmp_path / "beam").glob("nsp-*/" + _KILLED))
  rerun = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
  assert rerun.returncode == 0, rerun.stderr[-3000:]
  assert "[bert_jax.data] prepared" in rerun.stdout
  got = prepare_lib.prepare(cfg, verbose=False)  # reuses the rerun's output
  assert "beam_instances_builder" in got.instances_dir
  ref_cfg = config(make_config, tmp_path / "ref", files)
  ref_cfg.shard_documents = 2
  ref = prepare_lib.prepare(ref_cfg, verbose=False)
  assert unordered(records(got.instances_dir)) == unordered(records(ref.instances_dir))
  assert records(got.documents_dir) == records(ref.documents_dir)


def test_mlm_only_rows_on_beam_are_the_in_process_rows(make_config, tmp_path):
  """configs/bert_base.py:mlm_only (data.mode=mlm_packed: FULL-SENTENCES rows, no NSP):
  Beam writes the in-process rows and statistics (a zero count included)."""
  ref_cfg, beam_cfg = (make_config(tmp_path / name, mode="mlm_packed", shard_documents=4)
                       for name in ("ref", "beam"))
  ref = prepare_lib.prepare(ref_cfg, verbose=False)
  got = prepare_lib.prepare(beam_cfg, verbose=False, beam=IN_MEMORY)
  assert "beam_instances_builder" in got.instances_dir
  assert got.instances_dir.split("/")[-3].startswith("mlm_packed-")
  ref_rows, rows = records(ref.instances_dir), records(got.instances_dir)
  assert unordered(rows) == unordered(ref_rows) and len(rows["train"]) > 20 and rows["validation"]
  np.testing.assert_array_equal(got.unigram_counts, ref.unigram_counts)
  assert got.stats["instances"] == ref.stats["instances"]
  ids = [np.frombuffer(r[0], np.int32) for r in rows["train"]]
  assert {r[2] for r in rows["train"]} == {0}  # no next-sentence label
  assert all(len(i) <= 64 and i[0] == got.special.cls and i[-1] == got.special.sep for i in ids)
  # Every train token in exactly dupe_factor rows (packing drops nothing, cuts only
  # sentences longer than a row), between [CLS] and the [SEP]s.
  words = sum(int(np.isin(i, [got.special.cls, got.special.sep], invert=True).sum())
              for i in ids)
  assert words == beam_cfg.dupe_factor * got.stats["instances"]["train"]["tokens"]


def test_training_from_a_beam_prepared_dataset_resumes_exactly(tmp_path):
  """The loop trains on what Beam prepared (reusing it, not rebuilding), and a run resumed
  from its step-2 checkpoint repeats the uninterrupted losses exactly."""
  import shutil  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from bert_jax.train import loop  # pylint: disable=g-import-not-at-top
  from tests.train.test_loop import _losses, e2e_config  # pylint: disable=g-import-not-at-top
  # e2e_config's 6 steps, as tests/train/test_loop.py and tests/test_gcs.py train: the same
  # programs, compiled once in the session's persistent cache (4 steps were a schedule of
  # their own: other constants, another compile).
  config = e2e_config(str(tmp_path / "data"))
  beam_built = prepare_lib.prepare(config.data, verbose=False, beam=IN_MEMORY)
  assert "beam_instances_builder" in beam_built.instances_dir
  full = str(tmp_path / "full")
  task = registry.get_task(config)
  assert loop.train_and_evaluate(config, full, task)["step"] == 6
  assert task._prepared[16].instances_dir == beam_built.instances_dir  # pylint: disable=protected-access
  losses = _losses(full)
  assert sorted(losses) == [1, 2, 3, 4, 5, 6] and np.isfinite(list(losses.values())).all()
  part = tmp_path / "part"
  shutil.copytree(full, part)
  for later in ("4", "6"):
    shutil.rmtree(part / "checkpoints" / later)
  with open(part / "metrics.jsonl") as f:
    rows = [line for line in f if json.loads(line).get("step", 0) <= 2]
  with open(part / "metrics.jsonl", "w") as f:
    f.writelines(rows)
  assert loop.train_and_evaluate(config, str(part), registry.get_task(config))["step"] == 6
  resumed = _losses(str(part))
  assert resumed == losses


class FakeBeamWiki(documents_builder.LocalBuilder):
  """A catalog dataset whose `_generate_examples` is a beam.PTransform, as tfds's
  wikipedia/* and c4/* builders are (offline stand-in: their sources need the network)."""

  runners = []  # the runner of each download_and_prepare that built it

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {"text": tfds.features.Text(), "title": tfds.features.Text()}))

  def download_and_prepare(self, *args, download_config=None, **kwargs):
    if not self.is_prepared():
      runner = download_config and download_config.beam_runner
      FakeBeamWiki.runners.append(runner if isinstance(runner, str) else type(runner).__name__)
    return super().download_and_prepare(*args, download_config=download_config, **kwargs)

  def _split_generators(self, dl_manager):
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    beam = tfds.core.lazy_imports.apache_beam
    pages = [f"Article {i} opens here. It has a second sentence about topic {i}.\n"
             f"A new paragraph of article {i}. Another sentence follows it." for i in range(30)]
    pages[7] = ""  # an empty page: counted, skipped
    return beam.Create([(str(i), {"text": t, "title": f"t{i}"}) for i, t in enumerate(pages)])


def test_a_catalog_beam_builder_prepares_through_the_runner_then_our_stages(
    tmp_path, make_config, testdata):
  """corpus=tfds with a Beam-based catalog dataset (plus text files, as BERT's Wikipedia +
  books): the dataset is prepared by tfds's Beam support on the given runner, then our
  stages run; the result equals the in-process path's."""
  common = dict(corpus="tfds", tfds_name="fake_beam_wiki", tfds_data_dir=str(tmp_path / "tfds"),
                text_files=testdata("tiny_corpus.txt"), vocab_size=300, vocab_path=None,
                validation_fraction=0.1)
  beam_cfg = make_config(tmp_path / "beam", **common)
  got = prepare_lib.prepare(beam_cfg, verbose=False, beam=IN_MEMORY)
  # DirectRunner goes to tfds as Beam's Python direct runner (beam_util.BeamRun.beam_runner)
  assert FakeBeamWiki.runners == ["SwitchingDirectRunner"]
  c = got.stats["corpus"]
  assert c["empty_documents"] == 1 and c["files"] == 1
  assert c["documents"] == 29 + 6  # the pages but the empty one, the file's documents
  ref = prepare_lib.prepare(make_config(tmp_path / "ref", **common), verbose=False)
  assert FakeBeamWiki.runners == ["SwitchingDirectRunner"]  # prepared once, then reused
  assert records(got.documents_dir) == records(ref.documents_dir)
  with open(got.vocab_path, "rb") as f, open(ref.vocab_path, "rb") as g:
    assert f.read() == g.read()
  assert unordered(records(got.instances_dir)) == unordered(records(ref.instances_dir))


def test_runners_whose_workers_cannot_write_data_dir_are_refused(make_config, tmp_path):
  """Dataflow's workers share no disk with the launcher: a local data_dir is refused
  before anything is written (a gs:// one works: tests/data/test_beam_gcs.py)."""
  cfg = make_config(tmp_path / "data")
  with pytest.raises(ValueError, match=r"^--beam_runner=DataflowRunner with data.data_dir="
                     r".*: Dataflow workers share no disk with this machine; give a gs://"):
    prepare_lib.prepare(cfg, beam=beam_util.BeamRun("DataflowRunner", "--project=p"))
  assert not os.path.exists(tmp_path / "data")
  with pytest.raises(ValueError, match="--beam_runner='Dask'"):
    beam_util.BeamRun("Dask")


def test_the_direct_runner_is_beams_python_runner_never_prism(monkeypatch, tmp_path):
  """Beam's DirectRunner first tries Prism, a Go binary it would download from GitHub at
  run time (offline: a failed download and a beam-temp* directory left in /tmp per
  pipeline); BeamRun gives it the Python direct runner that --direct_* options configure,
  and a Beam catalog builder prepared in process (no --beam_runner) gets the same."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from apache_beam.runners.portability import prism_runner  # pylint: disable=g-import-not-at-top
  from apache_beam.testing import util as beam_testing  # pylint: disable=g-import-not-at-top
  tried = []

  def no_prism(self, pipeline, options):
    tried.append(type(self).__name__)
    raise RuntimeError("this test allows no Prism")  # Beam would fall back: recorded above

  monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", no_prism)
  run = beam_util.BeamRun("DirectRunner", "--direct_running_mode=in_memory")
  with run.pipeline() as p:
    doubled = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: 2 * x)
    beam_testing.assert_that(doubled, beam_testing.equal_to([2, 4, 6]))
  assert tried == []
  assert beam_util.BeamRun("FlinkRunner").beam_runner() == "FlinkRunner"  # others by name
  monkeypatch.setattr(FakeBeamWiki, "runners", [])
  # In process: tfds runs the builder's Beam pipeline (30 pages; our stages skip the empty one).
  assert corpora.prepare_tfds("fake_beam_wiki", str(tmp_path / "tfds")) == 30
  assert FakeBeamWiki.runners == ["SwitchingDirectRunner"] and tried == []
