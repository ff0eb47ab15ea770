"""AOT compilation for TPU topologies (libtpu, no TPU): bert_tiny's real train step.

The checks that need bert_tiny's TPU compiles run in one test, so each (topology, mesh)
compiles once, in one process (xdist's loadgroup does not group tests with pytest 9.2 +
xdist 3.8: its node-id suffix is not applied).
"""
import dataclasses
import importlib.util
import os
import re
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from bert_jax.runtime import parallel
from bert_jax.hardware import chips
from bert_jax.aot import hlo, report as report_lib
from bert_jax.aot import compile as compile_lib
from bert_jax.aot.check import check
from bert_jax.train import defaults

pytest.importorskip("libtpu")
ROOT = os.path.join(os.path.dirname(__file__), "..")
# Data x tensor and fsdp parallelism over two chip generations: two compiles. Both meshes
# reduce gradients over data-parallel replicas, so every check of _check_report covers
# data parallelism too; a pure data-parallel (4, 1, 1) compile existed only to compare
# FSDP's per-chip arguments against it, and DP's per-chip state is known without one: it
# is replicated, its whole bytes (report_lib.state_bytes' totals) on every chip.
CASES = [("v5e:2x2", (2, 1, 2)), ("v4:2x2x1", (1, 4, 1))]


@pytest.fixture(autouse=True, scope="module")
def _xla_flags_restored():
  """chips.topology_devices drops conftest's XLA:CPU-only flags from XLA_FLAGS before
  libtpu reads it (libtpu aborts on `--xla_cpu_use_fusion_emitters`): every compile below
  goes through that. Put back after the module, for the child processes of later tests."""
  before = os.environ.get("XLA_FLAGS", "")
  yield
  os.environ["XLA_FLAGS"] = before


def test_cpu_only_xla_flags_are_kept_from_libtpu(monkeypatch, capsys):
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=false "
                     "--xla_force_host_platform_device_count=8 --xla_cpu_enable_fast_math=true")
  assert chips.drop_cpu_only_xla_flags() == ["--xla_cpu_use_fusion_emitters=false",
                                             "--xla_cpu_enable_fast_math=true"]
  assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8"
  assert "not given to the TPU compiler" in capsys.readouterr().err
  assert chips.drop_cpu_only_xla_flags() == [] and not capsys.readouterr().err


@pytest.fixture(autouse=True)
def _pod_matmul_precision():
  """Compile what a pod runs: conftest asks for 'highest' f32 matmuls (for the CPU
  comparisons), which on TPU is a 6-pass bf16 emulation: twice the compile time (bert_tiny
  v5e:2x2 (4,1,1): 19.1 s vs 9.8 s) and a different program from the default a pod uses."""
  with jax.default_matmul_precision(None):
    yield


def _config(mesh, batch_size=32):
  spec = importlib.util.spec_from_file_location("bert_tiny", os.path.join(ROOT, "configs",
                                                                          "bert_tiny.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config()
  c.mesh_shape = mesh
  c.train.batch_size = batch_size
  defaults.resolve_platform(c, "tpu")  # what a pod runs (scanned layers), as check() does
  return c


def _compile(topology, mesh):
  """(setup, CompiledStep) of bert_tiny's train step for a topology and mesh."""
  from bert_jax.tasks import registry
  config = _config(mesh)
  setup = compile_lib.setup(config, topology, registry.get_task(config))
  return setup, compile_lib.compile_step(setup, "train", {}, 32)


def _check_report(setup, step, topology, mesh):
  assert step.compiled is not None and not step.error and step.hlo_text
  chip, _ = chips.parse_topology(topology)
  r = report_lib.step_report(step, setup.task, 32, chip, 4)
  assert r["fits"]
  m = r["hbm"]
  assert m["total"] == m["arguments"] + m["temporaries"] + m["outputs"] - m["aliased"] + m["program"]
  # The state is donated: every state output aliases its argument.
  assert m["aliased"] >= report_lib.state_bytes(setup.abstract)["params_per_chip"]
  # Model FLOPs: 6 N per token for the encoder weights (Kaplan et al. 2020) is a lower bound.
  cfg = setup.task.model_config
  n_layer_params = cfg.num_layers * 12 * cfg.hidden_size ** 2
  assert r["model_flops_per_step"] > 6 * n_layer_params * 32 * 128
  # Gradients must be reduced across the data-parallel replicas (all-reduce or
  # reduce-scatter); a pure tensor-parallel axis alone would not need it.
  coll = r["collectives"]
  assert coll["all-reduce"]["count"] + coll["reduce-scatter"]["count"] > 0
  if mesh[1] > 1:  # FSDP gathers the sharded weights before using them
    assert coll["all-gather"]["count"] > 0
  # Dropout's random bits and masks shard like their activations: no all-to-all moves a
  # u32 draw or a pred mask of a dropout.
  assert not [line for line in step.hlo_text.splitlines()
              if re.search(r"= \(?(u32|u16|pred)\[.* all-to-all\(", line)
              and "Dropout" in line]
  # attention_impl "auto" on TPU is splash's Mosaic kernel (forward and fused backward),
  # under shard_map with whole sequences per device: attention moves nothing between chips.
  assert "splash_mha_fwd" in step.hlo_text and "splash_mha_dkv" in step.hlo_text
  # What may still move by all-to-all: the MLM logits, vocabulary-split -> row-split for
  # the loss (parallel.spread_rows, on purpose), and the token lookup in an fsdp-split
  # table. Nothing from attention; nothing from the [CLS] pooler or the NSP head, which
  # had 4 of them on the (2, 1, 2) and (1, 4, 1) meshes before bert.py pinned their rows.
  expected = ("/mlm_head/", "jvp()/sharding_constraint", "/token_embedder/")
  moved = [re.search(r'op_name="([^"]*)"', line).group(1)
           for line in step.hlo_text.splitlines() if re.search(r" all-to-all\(", line)]
  assert not [op for op in moved if not any(e in op for e in expected)], moved
  return r


def _check_parameter_shardings(setup, step, mesh):
  """The parameter shardings of the compiled executable are the rules table's."""
  compiled_params = step.compiled.input_shardings[0][0].params
  boxed = jax.eval_shape(lambda k: setup.task.init(k, setup.task.dummy_batch(32, 128, 20)),
                         jax.random.key(0))["params"]
  names = nn.get_partition_spec(boxed)
  rules = dict(parallel.LOGICAL_RULES)
  mesh_sizes = dict(zip(parallel.MESH_AXES, mesh))
  flat_names = jax.tree_util.tree_leaves_with_path(names, is_leaf=lambda x: isinstance(x, P))
  flat_compiled = dict(jax.tree_util.tree_leaves_with_path(compiled_params))
  shapes = dict(jax.tree_util.tree_leaves_with_path(nn.unbox(boxed)))
  sharded = 0
  for path, spec in flat_names:
    shape = shapes[path].shape
    # Expected shard shape: each dim divided by the mesh size its logical name maps to.
    want = tuple(d // (mesh_sizes[rules[name]] if rules.get(name) else 1)
                 for d, name in zip(shape, tuple(spec) + (None,) * len(shape)))
    got = flat_compiled[path].shard_shape(shape)
    assert got == want, (jax.tree_util.keystr(path), spec, got, want)
    sharded += got != shape
  assert sharded > 10  # the check covers real sharding, not only replicated leaves


def _check_unprintable_hlo(setup, step):
  """jax 0.10.2 + libtpu 0.0.52 compile BERT-large for v5p-128, but printing the
  executable's HLO fails a RET_CHECK (an async-update with 3 operands): the report keeps
  the memory, FLOPs and roofline and says why the collectives are missing."""
  class Unprintable:
    def __getattr__(self, name):
      return getattr(step.compiled, name)

    def as_text(self):
      raise jax.errors.JaxRuntimeError(
          "INTERNAL: RET_CHECK failure (external/xla/xla/hlo/ir/hlo_instruction.cc:390) "
          "async-update instruction should have 1 operands but sees 3")

  text, why = hlo.compiled_text(Unprintable())
  assert text is None and why.startswith("INTERNAL: RET_CHECK failure")
  broken = compile_lib.CompiledStep("train", {}, Unprintable(), 1.0, hlo_text=None,
                                    hlo_error=why)
  chip, _ = chips.parse_topology("v5e:2x2")
  r = report_lib.step_report(broken, setup.task, 32, chip, 4)
  assert r["fits"] and r["hbm"] == report_lib.memory(step.compiled)
  assert r["collectives"] is None and r["collectives_error"] == why
  report = {"config": "bert_tiny", "topology": "v5e:2x2", "num_chips": 4,
            "chip": dataclasses.asdict(chip), "mesh": {"data": 2, "tensor": 2},
            "state": report_lib.state_bytes(setup.abstract), "steps": [r]}
  assert ("collectives per step: unknown (XLA could not print the compiled HLO: INTERNAL: "
          "RET_CHECK failure") in report_lib.format_report(report)


def test_bert_tiny_train_step_compiled_for_tpu_topologies():
  """Every check that needs a TPU compile, in one test: each (topology, mesh) compiles
  once (10-25 s of the TPU compiler's backend passes each), and one test runs on one
  xdist worker, so no compile is repeated in another process."""
  compiled = {}
  for topology, mesh in CASES:
    setup, step = compiled[topology, mesh] = _compile(topology, mesh)
    _check_report(setup, step, topology, mesh)
    _check_parameter_shardings(setup, step, mesh)
  # FSDP over 4 chips cuts the per-chip arguments (params + Adam moments) to <= 0.3x DP.
  # DP's per-chip arguments hold at least the whole replicated state (plus a batch shard),
  # so comparing against the state's total bytes is the same bound, a little stricter.
  fsdp_setup, fsdp_step = compiled["v4:2x2x1", (1, 4, 1)]
  state = report_lib.state_bytes(fsdp_setup.abstract)
  dp_state = state["params_total"] + state["opt_state_total"]
  fsdp_args = report_lib.memory(fsdp_step.compiled)["arguments"]
  assert fsdp_args <= 0.3 * dp_state, (fsdp_args, dp_state)
  _check_unprintable_hlo(*compiled["v5e:2x2", (2, 1, 2)])


def test_a_config_that_cannot_fit_fails_naming_the_dominant_term(tmp_path):
  # bert_tiny at 131072 rows of 128 tokens: its activations alone need ~50 GiB per chip.
  with pytest.raises(report_lib.DoesNotFitError,
                     match=r"train step does not fit: needs >= [\d.]+ GiB per chip of 16\.0 "
                           r"GiB; dominant term: temporaries") as e:
    check(_config((4, 1, 1), batch_size=131072), "v5e:2x2", steps=("train",),
          output_dir=str(tmp_path), config_name="bert_tiny")
  assert (tmp_path / "report.json").exists() and e.value.report["fits"] is False


def test_collectives_inside_a_loop_count_once_per_iteration():
  # A psum inside a 5-trip fori_loop over 8 devices: 5 all-reduces of f32[16] per call.
  mesh = jax.make_mesh((8,), ("d",), devices=jax.devices()[:8])

  def body(x):
    return jax.lax.fori_loop(0, 5, lambda i, y: jax.lax.psum(y, "d") * 0.5, x)

  f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("d"), out_specs=P("d"),
                            check_vma=False))
  x = jax.ShapeDtypeStruct((8 * 16,), jnp.float32, sharding=NamedSharding(mesh, P("d")))
  text = f.lower(x).compile().as_text()
  got = hlo.collectives(text)["all-reduce"]
  assert got == {"count": 5, "bytes": 5 * 16 * 4}


def test_hlo_shape_bytes():
  assert hlo.shape_bytes("f32[8192,128]{1,0:T(8,128)S(1)}") == 8192 * 128 * 4
  assert hlo.shape_bytes("(bf16[4,4]{1,0}, f32[]{:T(128)}, s8[3])") == 32 + 4 + 3


def test_topologies_and_cli_errors():
  assert chips.num_chips("v5e:4x4") == 16 and chips.num_chips("v5p-128") == 64
  assert chips.parse_topology("v5e-256")[0].hbm_bytes == 16 * 2 ** 30
  with pytest.raises(ValueError, match="topology 'v9:2x2'"):
    chips.parse_topology("v9:2x2")
  out = subprocess.run([sys.executable, "-m", "bert_jax.aot", "--config", "configs/bert_tiny.py",
                        "--topology", "tpu-2x2"], cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 2 and "error: topology 'tpu-2x2'" in out.stderr


def test_meshes_that_split_a_physical_axis():
  # v5p-128 is a 4x4x4 torus: an fsdp axis of 8 spans two physical axes (jax.make_mesh
  # refuses it; create_mesh falls back to splitting a physical axis).
  _, devices = chips.topology_devices("v5p-128")
  for shape, want in [((-1, 8, 1), (8, 8, 1)), ((-1, 8, 4), (2, 8, 4)), ((1, -1, 1), (1, 64, 1))]:
    mesh = parallel.create_mesh(shape, devices=devices)
    assert tuple(mesh.shape.values()) == want
    assert sorted(d.id for d in mesh.devices.flat) == sorted(d.id for d in devices)


def test_the_report_says_how_the_hosts_load_a_batch():
  """Tensor parallelism over 4 chips on v5e:4x4 (4 hosts of 4 chips): every batch block
  spans 2 hosts, so the 4 hosts read 2 distinct row shards (the pods of the README's
  tensor-parallel runs trained on inconsistent rows before rows followed the blocks)."""
  _, devices = chips.topology_devices("v5e:4x4")
  mesh = parallel.create_mesh((-1, 1, 4), devices=devices)
  got = report_lib.row_shards(mesh, batch_size=64)
  assert got == {"hosts": 4, "row_shards": 2, "hosts_per_block": 2, "blocks_per_host": 2,
                 "rows_per_host": 32}
  report = {"config": "bert_tiny", "topology": "v5e:4x4", "num_chips": 16,
            "chip": dataclasses.asdict(chips.parse_topology("v5e:4x4")[0]),
            "mesh": dict(mesh.shape), "row_shards": got, "steps": [],
            "state": {"num_params": 1e6, "params_per_chip": 1, "opt_state_per_chip": 1}}
  assert ("data: 4 hosts read 2 distinct row shards of 32 rows; each batch block is held "
          "(and loaded) by 2 hosts, each host holds 2 blocks") in report_lib.format_report(report)
  # v5p-128 with (-1, 8, 4): 16 hosts, 8 shards, each block on 2 hosts.
  _, devices = chips.topology_devices("v5p-128")
  got = report_lib.row_shards(parallel.create_mesh((-1, 8, 4), devices=devices), 256)
  assert (got["hosts"], got["row_shards"], got["hosts_per_block"]) == (16, 8, 2)


def test_word2vec_step_compiles_with_its_own_accounting(tmp_path):
  spec = importlib.util.spec_from_file_location("w2v", os.path.join(ROOT, "configs",
                                                                     "word2vec.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config()
  c.mesh_shape = (2, 1, 2)   # pairs over data, table rows over tensor
  report = check(c, "v5e:2x2", output_dir=str(tmp_path), config_name="word2vec",
                 vocab_size=100_001)
  (r,) = report["steps"]
  assert r["fits"] and (tmp_path / "train_phase0.hlo.txt").exists()
  # Two [100_002, 100] float32 tables (rows padded to the tensor axis), rows split 2-way.
  assert report["state"]["params_total"] == 2 * 100_002 * 100 * 4
  assert report["state"]["params_per_chip"] == report["state"]["params_total"] // 2
  assert report["state"]["opt_state_per_chip"] == 0
  pairs = c.train.chunks_per_step * c.train.chunk_size
  k1 = c.train.negatives + 1
  assert r["model_flops_per_step"] == pairs * 100 * (5 * k1 + k1 + 1)
  assert r["roofline"]["bound"] == "memory"   # sparse row updates: bytes, not FLOPs
  # Rows over tensor: each gather is completed by a psum over it (word2vec/step.py).
  assert r["collectives"]["all-reduce"]["count"] > 0
  assert "chunk loop" in report_lib.format_report(report)
