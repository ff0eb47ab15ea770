"""The data iterator's state in a checkpoint, saved per row shard, not per process.

grain's own orbax handler writes `process_{p}-of-{n}.json`: a run resumed with another
process count finds no file of its own and cannot restore. Here the file is named by the
row shard the iterator reads (parallel.row_shards): `shard_{i}-of-{n}.json`, written by
the first process of each shard (the others hold the same state). A run whose mesh or
process count gives the same row shards resumes each shard's stream exactly. Another
shard count continues the same global stream when the saved state is a bare batch
counter (`{"next_index": j}`: every shard at global batch j of sampling.TrainKeys, the
stream of pretraining, fine-tuning, GPT and unpacked translation): each new shard starts
at batch j of its own share. Any other state (a packer's buffer, grain workers) is tied to
its shard's stream and is refused with one line that says which layout resumes it.
Checkpoints written by grain's handler (`process_*`) still restore on their process count.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from etils import epath
import orbax.checkpoint as ocp


class DataLayoutError(ValueError):
  """The checkpoint's iterator state cannot continue on this run's row shards."""


@dataclasses.dataclass(frozen=True)
class Layout:
  """This process's row shard: which file it reads, and whether it writes one."""
  index: int = 0
  count: int = 1
  writes: bool = True  # the first process of its shard
  process_index: int = 0
  process_count: int = 1

  @classmethod
  def of(cls, shards=None) -> "Layout":
    """From parallel.RowShards (None: one shard per process, jax's process index)."""
    import jax  # pylint: disable=g-import-not-at-top
    pid, nproc = jax.process_index(), jax.process_count()
    if shards is None:
      return cls(pid, nproc, True, pid, nproc)
    return cls(shards.index, shards.count, shards.leads, pid, nproc)


_SHARD_FILE = re.compile(r"shard_(\d+)-of-(\d+)\.json$")


class Handler(ocp.CheckpointHandler):
  """Orbax item handler of a grain DatasetIterator, one JSON file per row shard."""

  def save(self, directory: epath.Path, args: "Save") -> None:
    if args.layout.writes:
      state = json.dumps(args.item.get_state(), indent=1)
      (directory / f"shard_{args.layout.index}-of-{args.layout.count}.json").write_text(state)

  def restore(self, directory: epath.Path, args: "Restore") -> Any:
    lay, it = args.layout, args.item
    own = directory / f"shard_{lay.index}-of-{lay.count}.json"
    legacy = directory / f"process_{lay.process_index}-of-{lay.process_count}.json"
    if own.exists():
      it.set_state(json.loads(own.read_text()))
    elif not _saved_shards(directory) and legacy.exists() and lay.count == lay.process_count:
      it.set_state(json.loads(legacy.read_text()))  # grain's handler: one file per process
    else:
      it.set_state(_portable_state(directory, lay))
    if hasattr(it, "start_prefetch"):  # as grain's handler: prefetch from the new position
      it.start_prefetch()
    return it

  def metadata(self, directory: epath.Path) -> None:
    del directory

  def structure(self, directory: epath.Path) -> None:
    del directory


def _saved_shards(directory: epath.Path) -> dict[int, epath.Path]:
  """{shard: file} of the shard files in `directory`; {} for grain's per-process files."""
  found = {}
  for f in directory.iterdir():
    m = _SHARD_FILE.search(f.name)
    if m:
      found[int(m.group(1))] = f
  return found


def _portable_state(directory: epath.Path, lay: Layout) -> dict:
  """The saved state, if it is one bare batch counter the same in every saved file."""
  files = list(_saved_shards(directory).values()) or [
      f for f in directory.iterdir() if f.name.startswith("process_")]
  states = [json.loads(f.read_text()) for f in files]
  shard_files = [_SHARD_FILE.search(f.name) for f in files]
  saved = (f"{shard_files[0].group(2)} row shards" if files and shard_files[0]
           else f"{len(files)} processes")
  if states and all(s == states[0] for s in states) and set(states[0]) == {"next_index"}:
    return states[0]
  raise DataLayoutError(
      f"{directory}: the data iterator was saved by {saved} and this run reads "
      f"{lay.count} (shard {lay.index}); its state is tied to each shard's own stream, so "
      "the data stream cannot continue exactly. Resume with the mesh and process count "
      "that saved it (or any giving the same row shards), or use a new --workdir.")


@ocp.args.register_with_handler(Handler, for_save=True)
@dataclasses.dataclass
class Save(ocp.args.CheckpointArgs):
  item: Any
  layout: Layout


@ocp.args.register_with_handler(Handler, for_restore=True)
@dataclasses.dataclass
class Restore(ocp.args.CheckpointArgs):
  item: Any
  layout: Layout
