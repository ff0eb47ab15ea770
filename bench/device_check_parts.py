"""The JAX parts of bench/device_check.py: attention paths against the reference, the
train steps (time, MFU, peak memory, one profiled step), and greedy decoding.

Only model and step code of bert_jax is imported (no data pipeline): this must run in a
stock CUDA image without tensorflow-datasets, grain, array_record or gensim.
"""
from __future__ import annotations

import re
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax.kernels import masks
from bert_jax.runtime import parallel
from bert_jax import kernels as kernels_lib
from bert_jax.train import mfu, optim
from bert_jax.train.defaults import base_config, model_config, train_config
from bert_jax.train.loop import create_sharded_state, jit_steps

# Custom calls that are kernels worth naming (cuDNN fMHA, cuBLAS, Pallas / Triton).
_KERNEL = re.compile(r'custom_call_target="([^"]+)"')


def kernels(compiled_text: str) -> list[str]:
  """The distinct custom-call targets of a compiled program (sorted); [] = XLA fusions."""
  names = set(_KERNEL.findall(compiled_text))
  return sorted(n for n in names if "fmha" in n or "cublas" in n or "triton" in n.lower()
                or "mosaic" in n.lower() or "splash" in n)


# ------------------------------------------------------------------------- attention
def attention_cases(b: int, t: int, h: int, d: int) -> dict:
  """name -> (mask, q_len) for padded, packed and causal bf16 rows."""
  rng = np.random.default_rng(0)
  lengths = rng.integers(t // 2, t + 1, size=b)
  padding = (np.arange(t)[None] < lengths[:, None]).astype(np.int32)        # [b, t]
  cut = t // 3
  packed = np.where(np.arange(t)[None] < cut, 1, 2) * padding                # 2 docs a row
  return {"padded": masks.SegmentMask(None, jnp.asarray(padding)),
          "packed": masks.SegmentMask(jnp.asarray(packed), jnp.asarray(packed)),
          "causal": masks.SegmentMask(causal=True)}


def check_attention(b: int, t: int, h: int, d: int, tol: float = 3e-2) -> list[dict]:
  """auto / xla against the float32 reference on the same bf16 inputs: output and the
  gradients of q, k, v (max error over the rows that have a key, relative to the
  reference's largest value), and the kernels each implementation's compiled program
  calls (one program per implementation, all cases in it: 3 compiles, not 9)."""
  rng = np.random.default_rng(1)
  q, k, v, cot = (jnp.asarray(rng.normal(size=(b, t, h, d)), jnp.bfloat16) for _ in range(4))
  cases = attention_cases(b, t, h, d)

  def loss(q, k, v, mask, impl):
    dtype = jnp.float32 if impl == "reference" else jnp.bfloat16
    out = kernels_lib.attention(*(x.astype(dtype) for x in (q, k, v)), mask=mask,
                                  dtype=dtype, implementation=impl)
    return jnp.sum(out.astype(jnp.float32) * cot.astype(jnp.float32)), out

  results = {}
  for impl in ("reference", "auto", "xla"):
    grad = jax.value_and_grad(loss, (0, 1, 2), has_aux=True)
    fn = jax.jit(lambda q, k, v, impl=impl: {
        name: grad(q, k, v, mask, impl) for name, mask in cases.items()})
    compiled = fn.lower(q, k, v).compile()
    got = {name: [np.asarray(out, np.float32)] + [np.asarray(g, np.float32) for g in grads]
           for name, ((_, out), grads) in compiled(q, k, v).items()}
    results[impl] = (got, kernels(compiled.as_text()) or ["xla fusions"])
  rows = []
  for name, mask in cases.items():
    has_key = np.broadcast_to(np.asarray(masks.as_dense(mask, t, t)).any(-1)[:, 0], (b, t))
    for impl in ("auto", "xla"):
      errs = [float(np.max(np.abs(g[has_key] - w[has_key])) / max(np.max(np.abs(w)), 1e-6))
              for g, w in zip(results[impl][0][name], results["reference"][0][name])]
      rows.append({"case": name, "impl": impl, "kernels": results[impl][1],
                   "max_rel_err": max(errs), "ok": max(errs) <= tol})
  return rows


# ------------------------------------------------------------------------ train steps
def step_config(family: str, size: dict, batch: int, seq: int) -> ml_collections.ConfigDict:
  """A pretraining (BERT, ModernBERT: MLM only) or LM (GPT) config in bf16, fused
  attention (no attention dropout), synthetic data; `size` overrides the variant's
  dimensions."""
  if family == "modernbert":
    c = base_config("bert_pretraining")
    c.model = model_config("modernbert/base", dtype="bfloat16", scan_layers=False, **size)
    c.data = ml_collections.ConfigDict(dict(mode="mlm_packed", max_seq_length=seq,
                                            max_predictions_per_seq=max(1, seq * 15 // 100)))
  elif family == "bert":
    c = base_config("bert_pretraining")
    c.model = model_config("bert/base", dtype="bfloat16", attention_dropout_rate=0.0, **size)
    c.data = ml_collections.ConfigDict(dict(mode="nsp", max_seq_length=seq,
                                            max_predictions_per_seq=max(1, seq * 15 // 100)))
  else:
    c = base_config("lm")
    c.model = model_config("gpt/small", dtype="bfloat16", attention_dropout_rate=0.0,
                           dropout_rate=0.0, **size)
    c.data = ml_collections.ConfigDict(dict(max_seq_length=seq, vocab_size=c.model.vocab_size))
  c.train = train_config(batch_size=batch, num_steps=1000, warmup_steps=10)
  return c


def synthetic_batch(task, family: str, batch: int, seq: int, vocab: int) -> dict:
  """The task's dummy batch with random ids and BERT's 15% masked positions."""
  rng = np.random.default_rng(0)
  preds = max(1, seq * 15 // 100)
  masked = family in ("bert", "modernbert")
  b = dict(task.dummy_batch(batch, seq, preds if masked else 0))
  b["input_ids"] = rng.integers(1000 if vocab > 2000 else 5, vocab, (batch, seq)).astype(np.int32)
  if masked:
    b["input_mask"] = np.ones((batch, seq), np.int32)
    b["masked_lm_positions"] = np.stack(
        [np.sort(rng.choice(np.arange(1, seq), preds, replace=False)) for _ in range(batch)]
    ).astype(np.int32)
    b["masked_lm_ids"] = rng.integers(5, vocab, (batch, preds)).astype(np.int32)
    b["masked_lm_weights"] = np.ones((batch, preds), np.float32)
  else:
    b["targets"] = np.roll(b["input_ids"], -1, axis=1)
  return b


def time_train_step(name: str, config, family: str, steps: int, profile_dir: str) -> dict:
  """Step time (median of `steps` after compile), MFU against the datasheet peak, peak
  device memory, and one step traced into profile_dir/<name>."""
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  task = registry.get_task(config)
  tc, seq = config.train, int(config.data.max_seq_length)
  tx, schedule = optim.make_optimizer(tc, int(tc.num_steps))
  mesh = parallel.create_mesh((1, 1, 1), devices=jax.devices()[:1])
  host = synthetic_batch(task, family, tc.batch_size, seq, task.model_config.vocab_size)
  with mesh:
    state, state_sh, _ = create_sharded_state(task, tx, mesh, host, config.seed)
    p_train, _ = jit_steps(task, tx, schedule, tc, state_sh, mesh)
    batch = {k: jax.device_put(v, parallel.batch_sharding(mesh, np.ndim(v)))
             for k, v in host.items()}
    t0 = time.perf_counter()
    state, m = p_train(state, batch)
    loss = float(m["loss"])
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(steps):
      t0 = time.perf_counter()
      state, m = p_train(state, batch)
      jax.block_until_ready(m)
      times.append(time.perf_counter() - t0)
    jax.profiler.start_trace(f"{profile_dir}/{name}")
    with jax.profiler.StepTraceAnnotation("train", step_num=steps + 2):
      state, m = p_train(state, batch)
      jax.block_until_ready(m)
    jax.profiler.stop_trace()
  step_s = sorted(times)[len(times) // 2]
  flops = tc.batch_size * task.flops_per_example(seq, max(1, seq * 15 // 100))
  peak = mfu.resolve_peak(dtype="bfloat16")
  stats = jax.devices()[0].memory_stats() or {}
  return {"name": name, "batch": int(tc.batch_size), "seq": seq, "step_s": step_s,
          "compile_s": compile_s, "first_loss": loss, "final_loss": float(m["loss"]),
          "mfu": mfu.mfu(flops, step_s, 1, peak.flops), "peak": peak.describe(),
          "peak_memory_gib": (stats["peak_bytes_in_use"] / 2**30
                              if "peak_bytes_in_use" in stats else None),
          "attention": kernels_lib.describe_phases(task.model_config, int(tc.batch_size),
                                                   [seq]).removeprefix(f"attention: S{seq} ")}


# --------------------------------------------------------------------------- decoding
def decode_tokens_per_s(dims: dict, batches, prompt: int, new: int) -> dict:
  """Greedy tokens/s of our GPT (KV cache, bf16) at each batch, compile excluded."""
  from bert_jax.decoding import gpt_generate  # pylint: disable=g-import-not-at-top
  from bert_jax.models.gpt import GPT  # pylint: disable=g-import-not-at-top
  from bert_jax.models.variants import get_model_config  # pylint: disable=g-import-not-at-top
  cfg = get_model_config("gpt/small", vocab_size=dims["vocab_size"], max_len=dims["max_len"],
                         hidden_size=dims["hidden_size"], num_layers=dims["num_layers"],
                         num_heads=dims["num_heads"], deterministic=True, dtype="bfloat16")
  model = GPT(cfg)
  params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))["params"]
  rng = np.random.default_rng(0)
  out = {}
  for b in batches:
    ids = jnp.asarray(rng.integers(0, dims["vocab_size"], (b, prompt)), jnp.int32)
    lengths = jnp.full((b,), prompt, jnp.int32)
    call = lambda: gpt_generate(model, params, ids, lengths, max_new_tokens=new,
                                temperature=0.0).block_until_ready()
    call()  # compile
    times = []
    for _ in range(2):
      t0 = time.perf_counter()
      call()
      times.append(time.perf_counter() - t0)
    out[str(b)] = b * new / min(times)
  return out
