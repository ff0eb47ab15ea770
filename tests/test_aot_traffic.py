"""bert_jax/aot/traffic.py: the bytes of a compiled step, by instruction and category."""
import importlib.util
import os

import jax
import pytest

from bert_jax.aot import cost
from bert_jax.aot import traffic

ROOT = os.path.join(os.path.dirname(__file__), "..")
F32 = 256 * 128 * 4   # one f32[256,128]
W = 128 * 128 * 4     # one f32[128,128]

# A step in miniature: a layer norm whose result stays in VMEM (S(1)), a dropout fusion
# with no metadata of its own (its fused root names it), a weight prefetched into VMEM by
# an async copy for a dot, a padded f32[2,64] (T(2,128): 2 x 128 floats), an embedding
# lookup, a 3-trip while loop whose body slices a [3, ...] weight stack and saves into a
# [3, ...] stack in place, a guarded update (the heavy branch of a conditional) and a
# layout copy.
HLO = r"""HloModule jit_step, is_scheduled=true

%fused_norm (p.0: f32[256,128], p.1: f32[256,128]) -> f32[256,128] {
  %p.0 = f32[256,128]{1,0} parameter(0)
  %p.1 = f32[256,128]{1,0} parameter(1)
  ROOT %add.0 = f32[256,128]{1,0:S(1)} add(%p.0, %p.1), metadata={op_name="jit(step)/jvp(Bert)/encoder/layers_0/attention_norm/add"}
}

%fused_dropout (p.2: f32[256,128]) -> f32[256,128] {
  %p.2 = f32[256,128]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %zeros = f32[256,128]{1,0} broadcast(%zero), dimensions={}
  %keep = pred[256,128]{1,0} compare(%p.2, %zeros), direction=GT
  ROOT %select.0 = f32[256,128]{1,0} select(%keep, %p.2, %zeros), metadata={op_name="jit(step)/jvp(Bert)/encoder/layers_0/attention/Dropout_0/select_n"}
}

%fused_head (p.3: f32[2,64]) -> f32[2,64] {
  %p.3 = f32[2,64]{1,0:T(2,128)} parameter(0)
  ROOT %mul.0 = f32[2,64]{1,0:T(2,128)} multiply(%p.3, %p.3)
}

%fused_update (p.4: f32[256,128], p.10: f32[128,128]) -> f32[256,128] {
  %p.4 = f32[256,128]{1,0} parameter(0)
  %p.10 = f32[128,128]{1,0} parameter(1)
  ROOT %mul.1 = f32[256,128]{1,0} multiply(%p.4, %p.4), metadata={op_name="jit(step)/jvp(Bert)/encoder/while/body/layers/mlp/wi/mul"}
}

%fused_slice (p.5: f32[3,128,128], p.6: s32[]) -> f32[128,128] {
  %p.5 = f32[3,128,128]{2,1,0} parameter(0)
  %p.6 = s32[] parameter(1)
  %zero.2 = s32[] constant(0)
  %ds = f32[1,128,128]{2,1,0} dynamic-slice(%p.5, %p.6, %zero.2, %zero.2), dynamic_slice_sizes={1,128,128}
  ROOT %w.1 = f32[128,128]{1,0} bitcast(%ds)
}

%fused_save (p.7: f32[3,256,128], p.8: f32[256,128], p.9: s32[]) -> f32[3,256,128] {
  %p.7 = f32[3,256,128]{2,1,0} parameter(0)
  %p.8 = f32[256,128]{1,0} parameter(1)
  %p.9 = s32[] parameter(2)
  %zero.3 = s32[] constant(0)
  %u = f32[1,256,128]{2,1,0} bitcast(%p.8)
  ROOT %dus = f32[3,256,128]{2,1,0} dynamic-update-slice(%p.7, %u, %p.9, %zero.3, %zero.3), metadata={op_name="jit(step)/jvp(Bert)/encoder/while/body/dynamic_update_slice"}
}

%fused_square (p.11: f32[256,128]) -> f32[256,128] {
  %p.11 = f32[256,128]{1,0} parameter(0)
  ROOT %mul.2 = f32[256,128]{1,0} multiply(%p.11, %p.11), metadata={op_name="jit(step)/cond/branch_1_fun/mul"}
}

%body (state: (s32[], f32[256,128], f32[3,128,128], f32[3,256,128])) -> (s32[], f32[256,128], f32[3,128,128], f32[3,256,128]) {
  %state = (s32[], f32[256,128]{1,0}, f32[3,128,128]{2,1,0}, f32[3,256,128]{2,1,0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %v = f32[256,128]{1,0} get-tuple-element(%state), index=1
  %ws = f32[3,128,128]{2,1,0} get-tuple-element(%state), index=2
  %saved = f32[3,256,128]{2,1,0} get-tuple-element(%state), index=3
  %one = s32[] constant(1)
  %i.next = s32[] add(%i, %one)
  %w.i = f32[128,128]{1,0} fusion(%ws, %i), kind=kLoop, calls=%fused_slice
  %v.next = f32[256,128]{1,0} fusion(%v, %w.i), kind=kLoop, calls=%fused_update
  %saved.next = f32[3,256,128]{2,1,0} fusion(%saved, %v, %i), kind=kLoop, calls=%fused_save
  ROOT %next = (s32[], f32[256,128]{1,0}, f32[3,128,128]{2,1,0}, f32[3,256,128]{2,1,0}) tuple(%i.next, %v.next, %ws, %saved.next)
}

%cond (state.1: (s32[], f32[256,128], f32[3,128,128], f32[3,256,128])) -> pred[] {
  %state.1 = (s32[], f32[256,128]{1,0}, f32[3,128,128]{2,1,0}, f32[3,256,128]{2,1,0}) parameter(0)
  %i.1 = s32[] get-tuple-element(%state.1), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%i.1, %three), direction=LT
}

%heavy (t.0: (f32[256,128])) -> (f32[256,128]) {
  %t.0 = (f32[256,128]{1,0}) parameter(0)
  %x.1 = f32[256,128]{1,0} get-tuple-element(%t.0), index=0
  %y.1 = f32[256,128]{1,0} fusion(%x.1), kind=kLoop, calls=%fused_square
  ROOT %t.1 = (f32[256,128]{1,0}) tuple(%y.1)
}

%light (t.2: (f32[256,128])) -> (f32[256,128]) {
  ROOT %t.2 = (f32[256,128]{1,0}) parameter(0)
}

ENTRY %main (x: f32[256,128], w: f32[128,128], b: f32[2,64], flag: pred[], ws: f32[3,128,128], saved: f32[3,256,128], ids: s32[16]) -> (f32[256,128], f32[2,64], f32[256,128], f32[16,128]) {
  %x = f32[256,128]{1,0} parameter(0)
  %w = f32[128,128]{1,0} parameter(1)
  %b = f32[2,64]{1,0:T(2,128)} parameter(2)
  %flag = pred[] parameter(3)
  %ws.0 = f32[3,128,128]{2,1,0} parameter(4)
  %saved.0 = f32[3,256,128]{2,1,0} parameter(5)
  %ids = s32[16]{0} parameter(6)
  %rows = f32[16,128]{1,0} gather(%w, %ids), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,128}, metadata={op_name="jit(step)/jvp(Bert)/embeddings/token_embedder/jit(_take)/gather"}
  %cs = (f32[128,128]{1,0:S(1)}, f32[128,128]{1,0}, u32[]{:S(2)}) copy-start(%w)
  %norm = f32[256,128]{1,0:S(1)} fusion(%x, %x), kind=kLoop, calls=%fused_norm, metadata={op_name="jit(step)/jvp(Bert)/encoder/layers_0/attention_norm/add"}
  %drop = f32[256,128]{1,0} fusion(%norm), kind=kLoop, calls=%fused_dropout
  %cd = f32[128,128]{1,0:S(1)} copy-done(%cs)
  %mm = f32[256,128]{1,0} dot(%drop, %cd), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %head = f32[2,64]{1,0:T(2,128)} fusion(%b), kind=kLoop, calls=%fused_head, metadata={op_name="jit(step)/jvp(Bert)/mlm_head/mul"}
  %zero.1 = s32[] constant(0)
  %init = (s32[], f32[256,128]{1,0}, f32[3,128,128]{2,1,0}, f32[3,256,128]{2,1,0}) tuple(%zero.1, %mm, %ws.0, %saved.0)
  %loop = (s32[], f32[256,128]{1,0}, f32[3,128,128]{2,1,0}, f32[3,256,128]{2,1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %out = f32[256,128]{1,0} get-tuple-element(%loop), index=1
  %t = (f32[256,128]{1,0}) tuple(%out)
  %branch = (f32[256,128]{1,0}) conditional(%flag, %t, %t), true_computation=%heavy, false_computation=%light
  %res = f32[256,128]{1,0} get-tuple-element(%branch), index=0
  %transposed = f32[256,128]{0,1} copy(%out)
  ROOT %root = (f32[256,128]{1,0}, f32[2,64]{1,0:T(2,128)}, f32[256,128]{0,1}, f32[16,128]{1,0}) tuple(%res, %head, %transposed, %rows)
}
"""


def test_hand_written_module_counts_each_instruction_as_xla_does():
  r = traffic.bytes_by_category(HLO, top=20)
  got = {d["name"]: (d["bytes"], d["hbm_bytes"], d["count"], d["category"]) for d in r["top"]}
  assert got == {
      # reads x twice, writes into VMEM: the write is no HBM traffic
      "norm": (3 * F32, 2 * F32, 1, "layer norm"),
      # under attention/ but dropout: dropout's rule comes first; reads norm from VMEM
      "drop": (2 * F32, F32, 1, "dropout masks"),
      # reads drop and the prefetched weight (VMEM), writes f32[256,128]; no op_name
      "mm": (2 * F32 + W, 2 * F32, 1, "dense (matmul)"),
      # the pair once: what copy-start reads (HBM), what copy-done writes (VMEM)
      "cs": (W, W, 1, "copies / layout"), "cd": (W, 0, 1, "copies / layout"),
      "head": (2 * 2 * 128 * 4, 2 * 2 * 128 * 4, 1, "embeddings and MLM head / loss"),
      # a lookup reads the 16 rows it takes (and the ids), not the whole table
      "rows": (2 * 16 * 128 * 4 + 16 * 4,) * 2 + (1, "embeddings and MLM head / loss"),
      # the loop body, 3 times: v and this layer's weight slice read, v written
      "v.next": (3 * (2 * F32 + W), 3 * (2 * F32 + W), 3, "dense (matmul)"),
      # the slice of the stack, the index; the slice written
      "w.i": (3 * (2 * W + 4), 3 * (2 * W + 4), 3, "other"),
      # in place: the update read and written, the index; the [3, ...] buffer not at all
      "saved.next": (3 * (2 * F32 + 4), 3 * (2 * F32 + 4), 3, "other"),
      "i.next": (3 * 12, 3 * 12, 3, "other"),   # s32 + s32 -> s32
      "lt": (3 * 9, 3 * 9, 3, "other"),         # the condition: s32, s32 -> pred
      # the taken (heavy) branch of the conditional only
      "y.1": (2 * F32, 2 * F32, 1, "optimizer update"),
      "transposed": (2 * F32, 2 * F32, 1, "copies / layout"),
  }
  assert [d["bytes"] for d in r["top"]] == sorted((d["bytes"] for d in r["top"]), reverse=True)
  assert r["total_bytes"] == sum(v[0] for v in got.values()) == sum(r["by_category"].values())
  assert r["hbm_bytes"] == sum(v[1] for v in got.values())
  assert r["by_category"]["dense (matmul)"] == 2 * F32 + W + 3 * (2 * F32 + W)
  assert r["by_category"]["copies / layout"] == 2 * W + 2 * F32
  assert r["by_category"]["collectives"] == r["by_category"]["attention"] == 0
  # The prefetch serves the dot: its HBM read is the dot's.
  assert r["async_copies_by_served"]["dense (matmul)"] == W
  assert sum(r["async_copies_by_served"].values()) == W
  assert [d["name"] for d in traffic.bytes_by_category(HLO, top=2)["top"]] == [
      "v.next", "saved.next"]


def test_categories_follow_the_first_matching_rule():
  c = traffic.category
  enc = "jit(train_step)/transpose(jvp(BertForPreTraining))/bert/encoder/"
  remat = enc + "jvp(BertForPreTraining)/bert/encoder/checkpoint/rematted_computation/"
  assert c("fusion", remat + "layers_3/attention_norm/reduce_sum") == "remat recompute"
  assert c("fusion", remat + "layers_3/attention_norm/reduce_sum",
           skip_remat=True) == "layer norm"
  assert c("fusion", enc + "checkpoint/layers_3/mlp_norm/add_any") == "layer norm"
  assert c("custom-call", enc + "layers_1/attention/shard_map/flash_dropout_dkv/pallas_call"
           ) == "attention"
  assert c("fusion", enc + "layers_1/attention/Dropout_0/jit(_bernoulli)/lt") == "dropout masks"
  assert c("fusion", enc + "layers_1/attention/transpose") == "attention"
  assert c("fusion", enc + "layers_1/attention/query/reduce_sum") == "dense (matmul)"
  assert c("fusion", "jit(train_step)/cond/branch_1_fun/add") == "optimizer update"
  assert c("fusion", "jit(train_step)/square") == "optimizer update"   # the gradient norm
  assert c("fusion", "jit(train_step)/jvp()/reduce_max") == "embeddings and MLM head / loss"
  assert c("fusion", "jit(train_step)/transpose(jvp(BertForPreTraining))/mlm_head/"
           "bert.attend/embeddings.attend/token_embedder.attend/dot_general"
           ) == "embeddings and MLM head / loss"
  assert c("copy", enc + "layers_1/attention/query/reshape") == "copies / layout"
  assert c("all-reduce", enc + "layers_1/mlp/wi/dot_general") == "collectives"
  assert c("fusion", "", fused={"parameter", "convolution"}) == "dense (matmul)"
  assert c("add", "") == "other"


def test_array_bytes_pads_to_the_tile_and_knows_vmem():
  assert traffic.array_bytes("f32[2,64]{1,0:T(2,128)}") == (1024, 1024)
  assert traffic.array_bytes("f32[8192,128]{1,0:T(8,128)S(1)}") == (8192 * 128 * 4, 0)
  # minor-to-major {0,1}: the physical minor dim is 300, padded to 384
  assert traffic.array_bytes("bf16[300,5]{0,1:T(8,128)(2,1)}") == (8 * 384 * 2,) * 2
  assert traffic.array_bytes("(f32[]{:T(128)}, s32[3])") == (128 * 4 + 12,) * 2


@pytest.fixture(autouse=True, scope="module")
def _xla_flags_restored():
  """chips.topology_devices drops conftest's XLA:CPU-only flags from XLA_FLAGS before
  libtpu reads it: put them back after the module (as tests/test_aot.py does)."""
  before = os.environ.get("XLA_FLAGS", "")
  yield
  os.environ["XLA_FLAGS"] = before


def test_bert_tiny_train_step_matches_the_compilers_bytes():
  """bert_tiny's unrolled train step for v5e:2x2, data parallel: the total is the
  compiler's "bytes accessed" within 25%, with each prefetch kept one counted copy
  (bert_jax/aot/cost.py's COST_COMPILER_OPTIONS)."""
  pytest.importorskip("libtpu")
  from bert_jax.aot import compile as compile_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from bert_jax.train import defaults  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location(
      "bert_tiny", os.path.join(ROOT, "configs", "bert_tiny.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  config.mesh_shape = (4, 1, 1)
  config.model.scan_layers = False   # the compiler counts a loop body once
  defaults.resolve_platform(config, "tpu")
  # What a pod compiles: conftest's "highest" f32 matmuls are a bf16 emulation on TPU.
  with jax.default_matmul_precision(None):
    setup = compile_lib.setup(config, "v5e:2x2", registry.get_task(config))
    step = compile_lib.compile_step(setup, "train", {}, config.train.batch_size,
                                    cost.COST_COMPILER_OPTIONS)
  analysis = step.compiled.cost_analysis()
  analysis = analysis[0] if isinstance(analysis, (list, tuple)) else analysis
  r = traffic.bytes_by_category(step.hlo_text)
  assert r["total_bytes"] == pytest.approx(analysis["bytes accessed"], rel=0.25)
  cats = r["by_category"]
  for name in ("optimizer update", "layer norm", "attention", "dense (matmul)",
               "embeddings and MLM head / loss", "collectives", "copies / layout"):
    assert cats[name] > 0, name
  assert cats["remat recompute"] == 0   # bert_tiny does not remat
  # Gradients are all-reduced over the 4 data-parallel chips: at least every parameter's
  # gradient read and its sum written, f32 (bert_tiny computes in float32).
  num_params = sum(x.size for x in jax.tree_util.tree_leaves(setup.abstract.params))
  assert cats["collectives"] >= 2 * 4 * num_params
  # The AdamW update reads and writes params and both moments at least once.
  assert cats["optimizer update"] >= 2 * 3 * 4 * num_params
  assert 0 < r["hbm_bytes"] < r["total_bytes"]
  top = r["top"]
  assert len(top) == 20 and all(d["count"] == 1 for d in top)   # unrolled: no loops
  assert top[0]["bytes"] >= top[-1]["bytes"] > 0
