"""word2vec training: the sparse step against numpy, sharded == single device, a real run."""
import importlib.util
import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from bert_jax.checkpoint import manager as ckpt_lib
from bert_jax.runtime import parallel
from bert_jax.word2vec.data import gensim_test_file
from bert_jax.word2vec import step as step_lib
from bert_jax.word2vec import train as task
from bert_jax.word2vec import vectors
from bert_jax.word2vec.vectors import load_word2vec_format

CONFIG = pathlib.Path(__file__).resolve().parents[2] / "configs" / "word2vec.py"


def get_config():
  spec = importlib.util.spec_from_file_location("word2vec_config", CONFIG)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config()


def test_config_locks_and_names_the_run_command():
  config = get_config()
  config.lock()
  assert config.task == "word2vec" and tuple(config.mesh_shape) == (-1, 1, 1)
  assert (config.model.embed_dim, config.data.window, config.data.min_count,
          config.train.negatives, config.train.epochs) == (100, 5, 5, 5, 5)
  config.train.epochs = 3                 # known fields stay settable (--config.train.epochs)
  with pytest.raises(AttributeError):
    config.train.epoch = 3                # a misspelled field is an error
  assert "python -m bert_jax.main --config configs/word2vec.py" in CONFIG.read_text()


@pytest.mark.parametrize("key, value, expected", [
    ("model.embed_dim", 0, "word2vec: model.embed_dim=0 must be an integer >= 1."),
    ("data.window", -2, "word2vec: data.window=-2 must be an integer >= 1."),
    ("train.negatives", 0, "word2vec: train.negatives=0 must be an integer >= 1."),
    ("train.alpha", 0.0, "word2vec: train.alpha=0.0 must be > 0 and train.min_alpha=0.0001 >= 0."),
])
def test_a_count_below_one_is_one_error_before_the_corpus_is_read(
    key, value, expected, tmp_path, monkeypatch):
  """--config.model.embed_dim=0 was a ZeroDivisionError traceback after the corpus."""
  monkeypatch.setattr(task.w2v_data, "load_corpus", lambda *a: pytest.fail("corpus read"))
  config = get_config()
  config.train.single_thread_xla_cpu = False
  section, name = key.split(".")
  config[section][name] = value
  with pytest.raises(ValueError) as info:
    task.train_and_evaluate(config, str(tmp_path))
  assert str(info.value) == expected


def np_sigmoid(x):
  return 1.0 / (1.0 + np.exp(-x))


def np_step(target, context, batch):
  """Sequential SGD chunks in float64 with np.add.at, the reference for the sparse step."""
  target, context = target.astype(np.float64).copy(), context.astype(np.float64).copy()
  chunks, size = batch["centers"].shape
  total = 0.0
  for s in range(chunks):
    n = min(size, max(0, int(batch["num_pairs"]) - s * size))
    if n == 0:
      break
    ctr, ctx = batch["centers"][s, :n], batch["contexts"][s, :n]
    cand = np.concatenate([ctx[:, None], batch["negatives"][s, :n]], 1)   # [n, k + 1]
    t, c = target[ctr], context[cand]
    logits = np.einsum("bd,bkd->bk", t, c)
    y = np.zeros_like(logits)
    y[:, 0] = 1
    total += -(np.log(np_sigmoid(logits[:, 0])) + np.log(np_sigmoid(-logits[:, 1:])).sum(1)).sum()
    g = np_sigmoid(logits) - y
    lr = float(batch["lr"][s])
    np.add.at(target, ctr, -lr * np.einsum("bk,bkd->bd", g, c))
    np.add.at(context, cand, -lr * g[:, :, None] * t[:, None, :])
  return target, context, total


def make_batch(vocab, chunks, size, k, num_pairs, seed=0):
  rng = np.random.default_rng(seed)
  centers = rng.integers(0, vocab, (chunks, size)).astype(np.int32)
  centers[0, :4] = 3                       # one centre row updated 4 times in a chunk
  contexts = rng.integers(0, vocab, (chunks, size)).astype(np.int32)
  negatives = rng.integers(0, vocab, (chunks, size, k)).astype(np.int32)
  negatives[0, 0] = 5                      # a row repeated inside one pair's negatives
  negatives[0, 1, 0] = contexts[0, 2]      # a context row also drawn as a negative
  lr = np.linspace(0.5, 0.3, chunks).astype(np.float32)   # large, so errors would show
  return dict(centers=centers, contexts=contexts, negatives=negatives, lr=lr,
              num_pairs=np.int32(num_pairs))


def run_step(mesh, vocab, dim, batch, context_init):
  state, shardings = step_lib.create_state(mesh, vocab, dim, seed=0)
  context = jax.device_put(jnp.zeros_like(state["params"]["context"]).at[:vocab].set(context_init),
                           shardings["params"]["context"])
  state = dict(state, params=dict(state["params"], context=context))
  start = np.asarray(state["params"]["target"])[:vocab]
  step = step_lib.make_train_step(mesh, shardings)
  arrays = {k: jax.device_put(batch[k], s) for k, s in step_lib.batch_shardings(mesh).items()}
  new_state, loss = step(state, arrays)
  return start, new_state, float(loss), step, (state, arrays)


def single_device_mesh():
  return parallel.create_mesh((1, 1, 1), devices=jax.devices()[:1])


def test_sparse_step_is_sequential_sgd_with_scatter_add():
  vocab, dim, k = 23, 6, 3
  batch = make_batch(vocab, chunks=4, size=8, k=k, num_pairs=21)   # chunk 2 partial, 3 empty
  context0 = np.random.default_rng(1).normal(0, 0.3, (vocab, dim)).astype(np.float32)
  start, state, loss, _, _ = run_step(single_device_mesh(), vocab, dim, batch, context0)
  ref_t, ref_c, ref_loss = np_step(start, context0, batch)
  np.testing.assert_allclose(state["params"]["target"], ref_t, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(state["params"]["context"], ref_c, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
  assert int(state["step"]) == 1


def test_sharded_step_equals_single_device_and_stays_sparse():
  assert jax.device_count() == 8
  vocab, dim, k = 37, 8, 3      # 37 rows pad to 38 over tensor=2
  batch = make_batch(vocab, chunks=3, size=16, k=k, num_pairs=40, seed=2)
  context0 = np.random.default_rng(3).normal(0, 0.3, (vocab, dim)).astype(np.float32)
  _, single, loss1, _, _ = run_step(single_device_mesh(), vocab, dim, batch, context0)
  mesh = parallel.create_mesh((2, 2, 2))
  _, sharded, loss8, step, args = run_step(mesh, vocab, dim, batch, context0)
  table = sharded["params"]["target"]
  assert table.shape == (38, 8) and table.sharding.spec == P("tensor", "fsdp")
  for name in ("target", "context"):
    np.testing.assert_allclose(np.asarray(sharded["params"][name])[:vocab],
                               single["params"][name], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(loss8, loss1, rtol=1e-5)
  # No collective moves a table: every all-reduce / all-gather is over pair rows (of
  # 16 or 8 pairs per chunk), none has a 38- or 19-row (vocabulary) dimension.
  hlo = step.lower(*args).compile().as_text()
  collectives = re.findall(r"= (\S+\[[\d,]*\])\S* (?:all-reduce|all-gather)[-a-z]*\(", hlo)
  assert collectives, "expected collectives on the 8-device mesh"
  for shape in collectives:
    dims = [int(x) for x in re.findall(r"\d+", shape.split("[")[1])]
    assert 38 not in dims and 19 not in dims, shape


def test_short_training_run_beats_random_vectors(tmp_path):
  """The README's word2vec command with the overrides of a short run that still learns:
  2 epochs with a larger step, a window of 3 (a third fewer pairs), decaying by words (at alpha 0.1 gensim's
  decay by sentences trains the enwiki articles (first) at rates near 0.1, and
  WordSim-353 falls to 0.08). Measured: WordSim-353 0.25, SimLex-999 0.17 (5 epochs of the
  defaults: bench/RESULTS.md@0762931 "word2vec").

  A child process at XLA's default flags (LLVM -O3, MLIR fusion emitters): this test's
  time goes into executing its program over ~2.9M pairs, not into compiling it, and the
  suite's compile-fast flags (tests/conftest.py) ran that 13x slower (training 3 s at -O3;
  the whole test 40-73 s in the pytest process, ~17 s as a child)."""
  workdir = tmp_path / "w2v"
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=8")
  proc = subprocess.run(
      [sys.executable, "-m", "bert_jax.main", "--config", str(CONFIG), "--workdir",
       str(workdir), "--config.mesh_shape=(1,1,1)",  # one device: the CPU run users make
       "--config.train.epochs=2", "--config.train.alpha=0.1", "--config.data.window=3",
       "--config.train.lr_decay=words", "--config.model.init_scale=0.5",
       "--config.export_format=binary"],
      capture_output=True, text=True, timeout=600, check=False, env=env,
      cwd=str(CONFIG.parents[1]))
  assert proc.returncode == 0, proc.stderr[-3000:]
  with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
    rows = [json.loads(l) for l in f]
  metrics = {k.split("/", 1)[1]: v for r in rows for k, v in r.items() if "/" in k}
  loaded = load_word2vec_format(str(workdir / "vectors.bin"))
  assert len(loaded.words) == 9733 and loaded.vectors.shape == (9733, 100)
  assert metrics["effective_words"] > 700_000   # 2 x 360k
  # The same vocabulary with random vectors, drawn like the initial T.
  random_vectors = np.random.default_rng(0).uniform(-0.005, 0.005, (len(loaded.words), 100))
  random_wv = vectors.WordVectors(loaded.words, random_vectors.astype(np.float32))
  wordsim = gensim_test_file("wordsim353.tsv")
  random_rho = vectors.evaluate_word_pairs(random_wv, wordsim)["spearman"]
  trained_rho = metrics["wordsim353_spearman"]
  print(f"WordSim-353 Spearman: trained {trained_rho:.3f}, random {random_rho:.3f}; "
        f"SimLex-999 {metrics['simlex999_spearman']:.3f}")
  assert abs(random_rho) < 0.1 and trained_rho > 0.2, (trained_rho, random_rho)
  assert metrics["simlex999_spearman"] > 0.05
  assert metrics["wordsim353_pairs"] + metrics["wordsim353_oov"] == 353
  # The exported vectors are the ones evaluated.
  assert vectors.evaluate_word_pairs(loaded, wordsim)["spearman"] == pytest.approx(trained_rho)
  # A checkpoint per epoch (the last at the final step), metrics.jsonl rows with steps.
  epochs = {r["step"]: r["train/epoch"] for r in rows if "train/epoch" in r}
  steps = ckpt_lib.Checkpointer(str(workdir / "checkpoints")).all_steps()
  assert [epochs[s] for s in steps] == [1, 2] and steps[-1] == max(r["step"] for r in rows)
  assert all("step" in r for r in rows) and "train/loss" in rows[0]


def tiny_config(tmp_path, prefix="w"):
  """2 epochs of 8-dim vectors for 26 words `{prefix}a`..`{prefix}z` (60 sentences of 30),
  several steps an epoch, on one device. Another prefix: the same counts, other words."""
  corpus = tmp_path / f"corpus_{prefix}.txt"
  rng = np.random.default_rng(0)
  words = [f"{prefix}{chr(97 + i)}" for i in range(26)]
  corpus.write_text("\n".join(" ".join(rng.choice(words, 30)) for _ in range(60)))
  config = get_config()
  config.mesh_shape = (1, 1, 1)
  config.train.chunk_size, config.train.chunks_per_step = 64, 4   # several steps an epoch
  config.data.corpus, config.data.text_glob, config.data.min_count = "text", str(corpus), 1
  config.model.embed_dim, config.train.epochs, config.export_format = 8, 2, "none"
  return config


def test_resume_from_an_epoch_state_continues_the_same_run(tmp_path):
  config = tiny_config(tmp_path)
  saved = []
  full = task.train_and_evaluate(
      config, str(tmp_path / "a"),
      checkpoint_fn=lambda step, state: saved.append(jax.tree.map(np.asarray, state)))
  assert [int(s["epoch"]) for s in saved] == [1, 2]
  # Restart from the epoch-1 state (as an orbax restore into the initial state would).
  resumed = task.train_and_evaluate(
      config, str(tmp_path / "b"),
      restore_fn=lambda init: jax.tree.map(lambda a, s: jax.device_put(s, a.sharding),
                                           init, saved[0]))
  assert int(resumed["state"]["epoch"]) == 2
  assert int(resumed["state"]["step"]) == int(full["state"]["step"])
  np.testing.assert_allclose(resumed["word_vectors"].vectors, full["word_vectors"].vectors,
                             rtol=1e-6, atol=1e-7)


def checkpoint_steps(workdir) -> list[int]:
  return sorted(int(n) for n in os.listdir(os.path.join(workdir, "checkpoints")) if n.isdigit())


class Preempted(Exception):
  pass


def _stop_after_the_first_save(config, workdir, monkeypatch):
  """Runs `config` in `workdir` until right after its epoch-1 checkpoint (as a preemption
  would stop it there)."""
  save = ckpt_lib.Checkpointer.save

  def save_then_stop(self, *args, **kwargs):
    save(self, *args, **kwargs)
    raise Preempted

  with monkeypatch.context() as m:
    m.setattr(ckpt_lib.Checkpointer, "save", save_then_stop)
    with pytest.raises(Preempted):
      task.train_and_evaluate(config, workdir)


def test_rerun_on_the_workdir_resumes_from_its_epoch_checkpoint(tmp_path, monkeypatch):
  config = tiny_config(tmp_path)
  full_dir, workdir = str(tmp_path / "full"), str(tmp_path / "run")
  full = task.train_and_evaluate(config, full_dir)         # no hooks: the command line's path
  steps = checkpoint_steps(full_dir)
  assert len(steps) == 2 and steps[-1] == int(full["state"]["step"])
  # The same run stopped right after its epoch-1 checkpoint (as a preemption would)...
  _stop_after_the_first_save(config, workdir, monkeypatch)
  assert checkpoint_steps(workdir) == steps[:1]
  # ... and restarted on its workdir: epoch 2 only, ending where the uninterrupted run does.
  resumed = task.train_and_evaluate(config, workdir)
  assert resumed["metrics"]["effective_words"] < full["metrics"]["effective_words"]
  assert int(resumed["state"]["epoch"]) == 2 and checkpoint_steps(workdir) == steps
  np.testing.assert_array_equal(resumed["word_vectors"].vectors, full["word_vectors"].vectors)
  # A finished run is evaluated again, not retrained.
  again = task.train_and_evaluate(config, workdir)
  assert again["metrics"]["effective_words"] == 0 and checkpoint_steps(workdir) == steps
  np.testing.assert_array_equal(again["word_vectors"].vectors, full["word_vectors"].vectors)
  # The checkpoint restores onto another mesh: rows over tensor, columns over fsdp.
  state, _ = step_lib.create_state(parallel.create_mesh((2, 2, 2)), 26, 8, seed=1)
  abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
                          state)
  ckpt = ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"))
  restored, meta, step = ckpt.restore(abstract)
  ckpt.close()
  assert step == steps[-1] and meta["vocab_size"] == 26 and meta["task"] == "word2vec"
  assert meta["config"]["model"]["embed_dim"] == 8
  assert restored["params"]["target"].sharding.spec == P("tensor", "fsdp")
  np.testing.assert_array_equal(np.asarray(restored["params"]["target"]),
                                full["word_vectors"].vectors)


def test_a_rerun_on_a_mesh_that_pads_the_tables_otherwise_resumes(tmp_path, monkeypatch):
  """Epoch 1 on one device (26 table rows), the rerun on a tensor axis of 4 (28 rows): the
  saved tables are re-padded, not refused as another run's, and epoch 2 ends where the
  uninterrupted one-device run does."""
  config = tiny_config(tmp_path)
  full = task.train_and_evaluate(config, str(tmp_path / "full"))
  workdir = str(tmp_path / "run")
  _stop_after_the_first_save(config, workdir, monkeypatch)
  assert ckpt_lib.read_meta(os.path.join(workdir, "checkpoints", str(checkpoint_steps(workdir)[0]))
                            )["table_rows"] == 26
  config.mesh_shape = (1, 1, 4)
  resumed = task.train_and_evaluate(config, workdir)
  assert int(resumed["state"]["epoch"]) == 2
  assert resumed["state"]["params"]["target"].shape == (28, 8)
  np.testing.assert_allclose(resumed["word_vectors"].vectors, full["word_vectors"].vectors,
                             rtol=1e-5, atol=1e-6)


def _epoch_losses(workdir) -> list[float]:
  rows = [json.loads(line) for line in open(os.path.join(workdir, "metrics.jsonl"))]
  return [r["train/epoch_loss"] for r in rows if "train/epoch_loss" in r]


def test_sigterm_saves_its_step_and_the_rerun_resumes_inside_the_epoch(tmp_path):
  """A SIGTERM in epoch 2 stops the run after that step and saves it, with the stream's
  position: nothing exported; the rerun trains only the rest of epoch 2 and ends with the
  uninterrupted run's vectors and epoch losses (bit for bit)."""
  config = tiny_config(tmp_path)
  config.train.log_every_steps = 1
  full = task.train_and_evaluate(config, str(tmp_path / "full"))
  first = checkpoint_steps(str(tmp_path / "full"))[0]
  workdir = str(tmp_path / "run")

  def log_fn(step, scalars):
    if step == first + 2 and "train/loss" in scalars:
      os.kill(os.getpid(), signal.SIGTERM)

  before = signal.getsignal(signal.SIGTERM)
  stopped = task.train_and_evaluate(config, workdir, log_fn=log_fn)
  assert (stopped["preempted"], stopped["stopped_by"], stopped["step"]) == (
      True, "SIGTERM", first + 2)
  assert stopped["word_vectors"] is None and checkpoint_steps(workdir) == [first, first + 2]
  assert signal.getsignal(signal.SIGTERM) is before  # the handler is put back
  position = ckpt_lib.read_meta(os.path.join(workdir, "checkpoints", str(first + 2)))["position"]
  assert position["batches"] == 2 and position["pairs"] > 0 and "rng" in position
  resumed = task.train_and_evaluate(config, workdir)
  assert int(resumed["state"]["step"]) == int(full["state"]["step"])
  np.testing.assert_array_equal(resumed["word_vectors"].vectors, full["word_vectors"].vectors)
  assert resumed["metrics"]["effective_words"] < full["metrics"]["effective_words"] / 2
  # Epoch 2's mean loss, of steps before and after the stop (the stopped run logged to
  # log_fn, so the workdir's metrics.jsonl holds the rerun's lines only).
  assert _epoch_losses(workdir) == _epoch_losses(str(tmp_path / "full"))[1:]


def test_checkpoints_every_n_steps_resume_inside_an_epoch(tmp_path, monkeypatch):
  """train.checkpoint_every_steps saves inside an epoch (not again at a step that ends
  one); a run killed right after the first such save resumes there exactly."""
  config = tiny_config(tmp_path)
  config.train.checkpoint_every_steps = 3
  config.train.keep_checkpoints = 10
  full_dir, workdir = str(tmp_path / "full"), str(tmp_path / "run")
  full = task.train_and_evaluate(config, full_dir)
  steps, end = checkpoint_steps(full_dir), int(full["state"]["step"])
  epoch_ends = [s for s in steps if "position" not in ckpt_lib.read_meta(
      os.path.join(full_dir, "checkpoints", str(s)))]
  assert len(epoch_ends) == 2 and epoch_ends[-1] == end
  assert sorted(set(range(3, end, 3)) | set(epoch_ends)) == steps
  _stop_after_the_first_save(config, workdir, monkeypatch)
  assert checkpoint_steps(workdir) == [3] and 3 < epoch_ends[0]
  resumed = task.train_and_evaluate(config, workdir)
  assert checkpoint_steps(workdir) == steps
  np.testing.assert_array_equal(resumed["word_vectors"].vectors, full["word_vectors"].vectors)
  assert _epoch_losses(workdir) == _epoch_losses(full_dir)


def test_default_run_writes_tensorboard_and_metrics_jsonl(tmp_path):
  config = tiny_config(tmp_path)
  config.train.epochs = 1
  out = task.train_and_evaluate(config, str(tmp_path / "run"))
  events = list((tmp_path / "run").glob("events.out.tfevents.*"))
  assert len(events) == 1
  content = events[0].read_bytes()
  assert b"train/epoch_loss" in content and b"eval/wordsim353_pairs" in content
  assert b"_hparams_/session_start_info" in content and b"model.embed_dim" in content
  lines = [json.loads(l) for l in open(tmp_path / "run" / "metrics.jsonl")]
  assert [l["train/epoch"] for l in lines if "train/epoch" in l] == [1]
  assert lines[-1]["step"] == int(out["state"]["step"])
  assert lines[-1]["perf/effective_words"] == out["metrics"]["effective_words"]
  assert {k.split("/")[0] for l in lines for k in l} == {"step", "time", "train", "perf", "eval"}
  assert checkpoint_steps(tmp_path / "run") == [int(out["state"]["step"])]


def test_checkpoint_of_another_model_or_vocabulary_is_a_clear_error(tmp_path):
  config = tiny_config(tmp_path)
  config.train.epochs = 1
  workdir = str(tmp_path / "run")
  task.train_and_evaluate(config, workdir)
  config.model.embed_dim = 16
  # A ValueError: main.py prints it as `error: ...`.
  with pytest.raises(ValueError, match=re.escape(
      "shape mismatch: ['params']['target'] checkpoint (26, 8) vs model (26, 16)")) as e:
    task.train_and_evaluate(config, workdir)
  assert isinstance(e.value, ckpt_lib.CheckpointMismatchError)
  assert "model.embed_dim=16" in str(e.value) and "new --workdir" in str(e.value)
  # Same table shape, other words: an error too, not rows silently meaning other words.
  other = tiny_config(tmp_path, prefix="v")
  other.train.epochs = 1
  with pytest.raises(ckpt_lib.CheckpointMismatchError, match="another vocabulary"):
    task.train_and_evaluate(other, workdir)
