"""Our pretraining train step against transformers' FlaxBertForPreTraining, same CPU, one run.

  .venv-bench/bin/python bench/train_step.py --case all --steps 5 --reps 3

(.venv-bench: see bench/requirements-bench.txt; the reference needs transformers 4.57,
which never goes into requirements.txt.)

Cases: `small` a 4-layer 256-wide BERT (bert/mini: 4 heads, mlp 1024, vocab 30522) at
seq 128 batch 32; `base` BERT-base at seq 128 batch 8; `compile` the lower + XLA-compile
time of our step for a 24-layer 256-wide model with and without scan over layers.

Both systems train BERT pretraining (MLM + NSP) in float32 on the same batch (15% of the
tokens masked, at most 20 predictions per row at seq 128, as google-research/bert's
create_pretraining_data) with the same optimizer: our `optim.make_optimizer` (global-norm
clip 1.0, AdamW b2 0.999 eps 1e-6 wd 0.01 off LayerNorm/bias, linear warmup + decay).

* ours: `PretrainingTask` from a ConfigDict, state from `create_sharded_state` on a
  1-device mesh, `steps.train_step` jitted as train/loop.py does (shardings, donation).
  Scan over layers, no remat; vocabulary logits only at the masked positions.
* reference: the HF Flax pretraining step as run_mlm_flax.py wrote it: the model's
  `__call__` with all-position logits, MLM cross-entropy on one-hot labels over every
  position (labels -100 off the masked positions), plus NSP cross-entropy; a flax
  TrainState, `jax.jit(..., donate_argnums=0)`.

Dropout: hidden dropout 0.1 in both (BERT). Attention-probability dropout 0 in both by
default, because our fused attention (`jax.nn.dot_product_attention`) has no dropout and
falls back to the written-out path otherwise; `--attention-dropout 0.1` runs both at BERT's
0.1 (ours then takes the reference attention path).

MFU: model FLOPs over the measured f32 matmul peak (`metrics.measured_peak_flops`, the
best of several measurements through the run). The numerator is the same for both
systems, `PretrainingTask.flops_per_example(seq, predictions)`: the reference's extra
vocabulary projections at unmasked positions are work the task does not need, so they
do not count. `ref own-FLOP util` also shows the reference with its own FLOPs (logits at
every position: `flops_per_example(seq, seq)`), i.e. how busy it keeps the cores.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from bert_jax import parallel  # noqa: E402
from bert_jax.tasks.pretraining import PretrainingTask  # noqa: E402
from bert_jax.train import mfu  # noqa: E402
from bert_jax.train import optim, steps  # noqa: E402
from bert_jax.train.defaults import base_config, train_config  # noqa: E402
from bert_jax.train.loop import create_sharded_state  # noqa: E402

# train/loop.py enters the mesh with `with mesh:`; the bench does the same (not set_mesh).
warnings.filterwarnings("ignore", message=".*`with mesh:` context manager has been deprecated")

CASES = {  # name -> (variant, model overrides, batch, seq, max predictions)
    "small": ("bert/mini", {}, 32, 128, 20),
    "base": ("bert/base", {}, 8, 128, 20),
}
# Our step with one setting changed, for --variants (what limits us on this CPU).
VARIANTS = {
    "unrolled": dict(scan_layers=False),
    "reference_attention": dict(attention_impl="reference"),
    "attention_dropout": dict(attention_dropout_rate=0.1),  # -> the written-out path
    "no_dropout": dict(dropout_rate=0.0),
    "remat_dots_no_batch": dict(remat_policy="dots_no_batch"),
}


# --------------------------------------------------------------------------- the batch
def make_batch(batch: int, seq: int, max_preds: int, vocab: int, seed: int = 0) -> dict:
  """One google-research/bert style batch: [CLS] A [SEP] B [SEP], 15% of tokens masked.

  90% of rows are full length, 10% shorter (short_seq_prob 0.1); per row
  min(max_preds, max(1, round(0.15 * tokens))) positions, never [CLS]/[SEP]/padding.
  """
  rng = np.random.default_rng(seed)
  cls_id, sep_id, mask_id, first_word = 101, 102, 103, 1000
  ids = np.zeros((batch, seq), np.int32)
  seg = np.zeros((batch, seq), np.int32)
  mask = np.zeros((batch, seq), np.int32)
  pos = np.zeros((batch, max_preds), np.int32)
  lm_ids = np.zeros((batch, max_preds), np.int32)
  lm_w = np.zeros((batch, max_preds), np.float32)
  for r in range(batch):
    n = seq if rng.random() >= 0.1 else int(rng.integers(8, seq))
    a = int(rng.integers(1, n - 3))  # tokens of sentence A; B gets the rest
    row = rng.integers(first_word, vocab, size=n).astype(np.int32)
    row[0], row[a + 1], row[n - 1] = cls_id, sep_id, sep_id
    ids[r, :n], mask[r, :n], seg[r, a + 2:n] = row, 1, 1
    candidates = [i for i in range(n) if row[i] not in (cls_id, sep_id)]
    k = min(max_preds, max(1, int(round(0.15 * n))))
    chosen = np.sort(rng.choice(candidates, size=k, replace=False))
    pos[r, :k], lm_ids[r, :k], lm_w[r, :k] = chosen, row[chosen], 1.0
    for i in chosen:  # 80% [MASK], 10% random, 10% unchanged
      u = rng.random()
      ids[r, i] = mask_id if u < 0.8 else (rng.integers(first_word, vocab) if u < 0.9 else row[i])
  return dict(input_ids=ids, input_mask=mask, segment_ids=seg, masked_lm_positions=pos,
              masked_lm_ids=lm_ids, masked_lm_weights=lm_w,
              next_sentence_labels=rng.integers(0, 2, size=batch).astype(np.int32))


def hf_batch(b: dict) -> dict:
  """The same batch as run_mlm_flax feeds it: labels [batch, seq], -100 off the masked tokens."""
  labels = np.full(b["input_ids"].shape, -100, np.int32)
  for r in range(labels.shape[0]):
    k = int(b["masked_lm_weights"][r].sum())
    labels[r, b["masked_lm_positions"][r, :k]] = b["masked_lm_ids"][r, :k]
  return dict(input_ids=b["input_ids"], attention_mask=b["input_mask"],
              token_type_ids=b["segment_ids"], labels=labels,
              next_sentence_label=b["next_sentence_labels"])


# ------------------------------------------------------------------------------- ours
def our_config(variant: str, overrides: dict, batch: int, seq: int, preds: int,
               attention_dropout: float) -> ml_collections.ConfigDict:
  c = base_config("bert_pretraining")
  c.model = ml_collections.ConfigDict(dict(
      variant=variant, dtype="float32", scan_layers=True, remat_policy="none",
      dropout_rate=0.1, attention_dropout_rate=attention_dropout))
  c.model.update(overrides)
  c.data = ml_collections.ConfigDict(dict(mode="nsp", max_seq_length=seq,
                                          max_predictions_per_seq=preds))
  c.train = train_config(batch_size=batch)  # BERT's optimizer and schedule
  return c


def build_ours(config):
  """(task, step fn, state): as train/loop.py builds and jits them, on a 1-device mesh."""
  task = PretrainingTask(config)
  tc = config.train
  tx, schedule = optim.make_optimizer(tc, int(tc.num_steps))
  mesh = parallel.create_mesh((1, 1, 1), devices=jax.devices()[:1])
  dummy = task.dummy_batch(tc.batch_size, config.data.max_seq_length,
                           config.data.max_predictions_per_seq)
  with mesh:
    state, state_sh, _ = create_sharded_state(task, tx, mesh, dummy, config.seed)
  p_train = jax.jit(functools.partial(steps.train_step, task=task, tx=tx, schedule=schedule,
                                      accum_steps=1),
                    in_shardings=(state_sh, None), out_shardings=(state_sh, None),
                    donate_argnums=(0,))

  def step(carry, batch):
    with mesh:
      new_state, m = p_train(carry, batch)
    return new_state, m["loss"]
  return task, step, state, (p_train, mesh)


# -------------------------------------------------------------------------- reference
def build_reference(model_cfg, config):
  """(step fn, carry, jitted step) of the HF Flax pretraining step with our optimizer."""
  from flax.training import common_utils, train_state  # pylint: disable=g-import-not-at-top
  from transformers import BertConfig, FlaxBertForPreTraining  # pylint: disable=g-import-not-at-top
  hf_cfg = BertConfig(
      vocab_size=model_cfg.vocab_size, hidden_size=model_cfg.hidden_size,
      num_hidden_layers=model_cfg.num_layers, num_attention_heads=model_cfg.num_heads,
      intermediate_size=model_cfg.d_mlp, hidden_act="gelu",
      hidden_dropout_prob=model_cfg.dropout_rate,
      attention_probs_dropout_prob=model_cfg.attention_dropout_rate,
      max_position_embeddings=model_cfg.max_len, type_vocab_size=model_cfg.type_vocab_size,
      layer_norm_eps=model_cfg.layer_norm_eps, initializer_range=model_cfg.init_std)
  seq = config.data.max_seq_length
  model = FlaxBertForPreTraining(hf_cfg, input_shape=(1, seq), seed=0, dtype=jnp.float32,
                                 _do_init=False)  # random init, jitted below; no download
  params = jax.jit(model.init_weights, static_argnums=1)(jax.random.PRNGKey(0), (1, seq))
  tx, _ = optim.make_optimizer(config.train, int(config.train.num_steps))
  state = train_state.TrainState.create(apply_fn=model.__call__, params=params, tx=tx)
  vocab = hf_cfg.vocab_size

  def train_step(state, batch, dropout_rng):
    dropout_rng, new_dropout_rng = jax.random.split(dropout_rng)

    def loss_fn(params):
      out = state.apply_fn(batch["input_ids"], batch["attention_mask"],
                           batch["token_type_ids"], params=params, dropout_rng=dropout_rng,
                           train=True)
      logits = out.prediction_logits                           # [batch, seq, vocab]
      labels = batch["labels"]
      label_mask = jnp.where(labels != -100, 1.0, 0.0)
      mlm = optax.softmax_cross_entropy(logits, common_utils.onehot(labels, vocab)) * label_mask
      mlm = mlm.sum() / label_mask.sum()
      nsp = optax.softmax_cross_entropy_with_integer_labels(
          out.seq_relationship_logits, batch["next_sentence_label"]).mean()
      return mlm + nsp

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss, new_dropout_rng

  p_train = jax.jit(train_step, donate_argnums=(0,))

  def step(carry, batch):
    st, rng = carry
    st, loss, rng = p_train(st, batch, rng)
    return (st, rng), loss
  return step, (state, jax.random.PRNGKey(1)), p_train


# ----------------------------------------------------------------------------- timing
def run_steps(step, carry, batch, n: int):
  """(carry, loss, seconds per step) of n steps, synchronized at the end."""
  t0 = time.perf_counter()
  loss = None
  for _ in range(n):
    carry, loss = step(carry, batch)
  jax.block_until_ready((carry, loss))
  return carry, float(loss), (time.perf_counter() - t0) / n


class Peak:
  """The best of `measured_peak_flops` measurements taken between the timed repetitions."""

  def __init__(self):
    self.value = 0.0

  def measure(self):
    self.value = max(self.value, mfu.measured_peak_flops.__wrapped__("float32"))
    return self.value


def bench_case(name: str, args, peak: Peak) -> list[dict]:
  variant, overrides, batch, seq, preds = CASES[name]
  systems = {"ours": dict(overrides)}
  for v in args.variants:
    systems[f"ours/{v}"] = dict(overrides, **VARIANTS[v])
  host = make_batch(batch, seq, preds, 30522)
  runners, flops = {}, None
  for label, ov in systems.items():
    cfg = our_config(variant, ov, batch, seq, preds, args.attention_dropout)
    task, step, state, _ = build_ours(cfg)
    b = jax.device_put({k: jnp.asarray(v) for k, v in host.items()})
    runners[label] = [step, state, b]
    if flops is None:
      flops = task.flops_per_example(seq, preds)
      own_ref_flops = task.flops_per_example(seq, seq)
      model_cfg, config = task.model_config, cfg
  if not args.skip_reference:
    step, carry, _ = build_reference(model_cfg, config)
    runners["transformers"] = [step, carry, jax.device_put(
        {k: jnp.asarray(v) for k, v in hf_batch(host).items()})]
  first_loss, best, compile_s = {}, {}, {}
  for label, r in runners.items():  # compile + warm up
    t0 = time.perf_counter()
    r[1], first_loss[label], _ = run_steps(r[0], r[1], r[2], 1)
    compile_s[label] = time.perf_counter() - t0
    r[1], _, _ = run_steps(r[0], r[1], r[2], args.warmup)
  for _ in range(args.reps):  # interleaved, so every system sees the same background load
    peak.measure()
    for label, r in runners.items():
      r[1], loss, dt = run_steps(r[0], r[1], r[2], args.steps)
      if not np.isfinite(loss):
        raise FloatingPointError(f"{name}/{label}: non-finite loss {loss}")
      best[label] = min(best.get(label, np.inf), dt)
  peak.measure()
  rows = []
  for label in runners:
    dt = best[label]
    row = dict(case=name, system=label, batch=batch, seq=seq, step_s=dt, seq_per_s=batch / dt,
               first_loss=first_loss[label], first_step_s=compile_s[label],
               model_tflop_per_step=batch * flops / 1e12)
    row["mfu"] = batch * flops / dt / peak.value
    if label == "transformers":
      row["own_flop_util"] = batch * own_ref_flops / dt / peak.value
    rows.append(row)
  if "transformers" in best:
    for row in rows:
      row["speedup"] = best["transformers"] / row["step_s"]
  return rows


def bench_compile(args) -> list[dict]:
  """Trace+lower and XLA compile seconds of our step, 24 layers of bert/mini, scan on/off."""
  rows = []
  for scan in (True, False):
    lower_s, compile_s = np.inf, np.inf
    for _ in range(args.compile_reps):  # a fresh task and jit each time: nothing cached
      cfg = our_config("bert/mini", dict(num_layers=24, scan_layers=scan), 32, 128, 20,
                       args.attention_dropout)
      task, _, state, (p_train, mesh) = build_ours(cfg)
      b = jax.device_put({k: jnp.asarray(v) for k, v in make_batch(32, 128, 20, 30522).items()})
      with mesh:
        t0 = time.perf_counter()
        lowered = p_train.lower(state, b)
        t1 = time.perf_counter()
        lowered.compile()
        t2 = time.perf_counter()
      lower_s, compile_s = min(lower_s, t1 - t0), min(compile_s, t2 - t1)
      del task, state, lowered
    rows.append(dict(case="compile", system=f"ours, 24 layers, scan_layers={scan}",
                     lower_s=lower_s, compile_s=compile_s, total_s=lower_s + compile_s))
  return rows


def print_rows(rows, peak: Peak):
  step_rows = [r for r in rows if r["case"] != "compile"]
  if step_rows:
    print(f"\nmeasured f32 matmul peak: {peak.value / 1e9:.1f} GFLOP/s "
          f"(best of {mfu.__name__}.measured_peak_flops over the run)")
    print(f"{'case':6} {'system':28} {'batch':>5} {'seq':>4} {'step s':>8} {'seq/s':>8} "
          f"{'vs ref':>7} {'MFU':>6} {'ref own-FLOP util':>17} {'first loss':>10} "
          f"{'1st step s':>10}")
    for r in step_rows:
      own = f"{r['own_flop_util']:.1%}" if "own_flop_util" in r else ""
      sp = f"{r['speedup']:.2f}x" if "speedup" in r else ""
      print(f"{r['case']:6} {r['system']:28} {r['batch']:5d} {r['seq']:4d} {r['step_s']:8.3f} "
            f"{r['seq_per_s']:8.2f} {sp:>7} {r['mfu']:6.1%} {own:>17} {r['first_loss']:10.3f} "
            f"{r['first_step_s']:10.1f}")
  comp = [r for r in rows if r["case"] == "compile"]
  if comp:
    print(f"\n{'compile (batch 32, seq 128)':40} {'lower s':>8} {'compile s':>9} {'total s':>8}")
    for r in comp:
      print(f"{r['system']:40} {r['lower_s']:8.1f} {r['compile_s']:9.1f} {r['total_s']:8.1f}")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--case", choices=("small", "base", "compile", "all"), default="all")
  parser.add_argument("--steps", type=int, default=5, help="timed steps per repetition")
  parser.add_argument("--reps", type=int, default=3, help="timed repetitions (best is kept)")
  parser.add_argument("--warmup", type=int, default=2, help="untimed steps after the first")
  parser.add_argument("--compile-reps", type=int, default=2)
  parser.add_argument("--attention-dropout", type=float, default=0.0,
                      help="attention-probability dropout of both systems (BERT: 0.1)")
  parser.add_argument("--variants", default="",
                      help=f"comma-separated extra runs of our step: {','.join(VARIANTS)}")
  parser.add_argument("--skip-reference", action="store_true")
  args = parser.parse_args()
  args.variants = [v for v in args.variants.split(",") if v]
  for v in args.variants:
    if v not in VARIANTS:
      parser.error(f"unknown variant {v!r}; known: {sorted(VARIANTS)}")
  print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} x{jax.device_count()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()} at start", flush=True)
  peak = Peak()
  rows = []
  cases = ("small", "base", "compile") if args.case == "all" else (args.case,)
  for case in cases:
    rows += bench_compile(args) if case == "compile" else bench_case(case, args, peak)
  print_rows(rows, peak)
  print(f"\nload average {os.getloadavg()} at end")


if __name__ == "__main__":
  main()
