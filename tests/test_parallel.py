"""parallel.row_shards: which rows each process loads, from the mesh's batch blocks;
parallel.fit_mesh_shape: a config's mesh on the devices present."""
import jax
import numpy as np
import pytest

from bert_jax.runtime import parallel


def test_one_process_is_one_shard_whatever_the_mesh():
  for shape in [(8, 1, 1), (2, 2, 2), (1, 1, 8)]:
    shards = parallel.row_shards(parallel.create_mesh(shape))
    assert (shards.count, shards.index, shards.hosts_per_block, shards.processes) == (1, 0, 1, 1)
    assert shards.blocks_per_shard == shape[0] * shape[1]


def test_blocks_shared_by_processes_make_one_shard_each():
  # 4 processes x 2 devices, mesh (2, 1, 4): processes 0, 1 hold block 0; 2, 3 block 1.
  held = {0: {0}, 1: {0}, 2: {1}, 3: {1}}
  got = [parallel.shards_of_blocks(held, p, (2, 1, 4)) for p in range(4)]
  assert [(s.index, s.count, s.hosts_per_block) for s in got] == [(0, 2, 2), (0, 2, 2),
                                                                   (1, 2, 2), (1, 2, 2)]
  # Non-contiguous blocks are fine (jax places a process's rows in its blocks' order).
  got = parallel.shards_of_blocks({0: {0, 2}, 1: {1, 3}}, 1, (4, 1, 2))
  assert (got.index, got.count, got.blocks_per_shard) == (1, 2, 2)


def test_a_layout_no_loader_can_feed_is_refused_naming_the_mesh():
  with pytest.raises(ValueError, match=r"config.mesh_shape=\(2, 1, 4\) on 2 processes splits "
                     r"the batch's \(data x fsdp\) blocks unevenly \(process 0: blocks \[0, 1\]; "
                     r"process 1: blocks \[1\]\)"):
    parallel.shards_of_blocks({0: {0, 1}, 1: {1}}, 0, (2, 1, 4))


def test_host_to_global_builds_the_true_global_shape():
  mesh = parallel.create_mesh((2, 2, 2))
  batch = {"ids": np.arange(16).reshape(8, 2), "w": np.ones(8, np.float32)}
  out = parallel.host_to_global(batch, mesh)
  assert out["ids"].shape == (8, 2) and out["w"].shape == (8,)
  np.testing.assert_array_equal(np.asarray(out["ids"]), batch["ids"])
  assert out["ids"].sharding.spec == jax.sharding.PartitionSpec(("data", "fsdp"), None)


@pytest.mark.parametrize("requested, devices, fitted", [
    ((-1, 4, 1), 8, (2, 4, 1)),     # fits: as asked
    ((-1, 4, 1), 1, (1, 1, 1)),     # bert_large on one GPU
    ((-1, 4, 1), 2, (1, 2, 1)),
    ((2, -1, 4), 6, (2, 3, 1)),
])
def test_a_mesh_with_a_free_axis_shrinks_to_the_devices(requested, devices, fitted):
  lines = []
  assert parallel.fit_mesh_shape(requested, devices, lines.append) == fitted
  assert len(lines) == (0 if devices == 8 else 1)
  if lines:
    assert lines[0].startswith(f"config.mesh_shape={requested} cannot exist on {devices}")


def test_an_exact_mesh_that_cannot_exist_names_the_shape_to_pass():
  with pytest.raises(ValueError, match=r"uses 4 devices, but 1 are present.*"
                                       r"--config.mesh_shape='\(1, 1, 1\)'"):
    parallel.fit_mesh_shape((4, 1, 1), 1)
