"""What the per-step stop vote (bert_jax.runtime.multihost.StopVote) costs a training step.

  /work/main/.venv/bin/python tools/stop_vote.py [--processes 2,4,8] [--steps 300]

Starts jax.distributed's coordination service in this process and one client per
stand-in process (on 127.0.0.1, as a local multi-process run has them), each casting its
vote every step from its own thread, all in lockstep as a training loop's processes are.
Prints the wall time per step of the votes alone (median of 3 repeats): the host time a
step gains, with no device work waited on. On a pod the coordinator is across the network:
add one round trip (set + read) per step.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The root, bench/ (bench_util) and the suites whose parts the probes reuse.
sys.path[:0] = [_ROOT, os.path.join(_ROOT, "bench")] + [
    os.path.join(_ROOT, "bench", d) for d in ("time_to_quality", "finetune", "inference")]
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import bench_util  # noqa: E402  (bench/, the script's own directory)


def _clients(n: int):
  import portpicker  # pylint: disable=g-import-not-at-top
  from jaxlib import _jax  # pylint: disable=g-import-not-at-top
  address = f"127.0.0.1:{portpicker.pick_unused_port()}"
  service = _jax.get_distributed_runtime_service(address, n)
  clients = [_jax.get_distributed_runtime_client(address, i, init_timeout=60) for i in range(n)]
  _together([c.connect for c in clients])
  return service, clients


def _together(fns):
  threads = [threading.Thread(target=f) for f in fns]
  for t in threads:
    t.start()
  for t in threads:
    t.join()


def seconds_per_step(clients, steps: int) -> float:
  from bert_jax.runtime import multihost  # pylint: disable=g-import-not-at-top
  key = f"bench/{time.monotonic_ns()}"  # one run's votes, shared by its stand-ins
  votes = [multihost.StopVote(c, process_index=i, process_count=len(clients), key=key)
           for i, c in enumerate(clients)]

  def loop(vote):
    for _ in range(steps):
      vote.cast("")

  t0 = time.perf_counter()
  _together([lambda v=v: loop(v) for v in votes])
  return (time.perf_counter() - t0) / steps


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--processes", default="2,4,8")
  parser.add_argument("--steps", type=int, default=300)
  args = parser.parse_args()
  bench_util.header("stop_vote")
  print("| processes | ms per step (median of 3) |\n| --- | --- |")
  kept = []
  for n in map(int, args.processes.split(",")):
    service, clients = _clients(n)
    ms = statistics.median(seconds_per_step(clients, args.steps) * 1e3 for _ in range(3))
    print(f"| {n} | {ms:.2f} |", flush=True)
    kept.append((service, clients))  # shut down only at exit: a shutdown here could stall
  print(bench_util.load_line("end"), flush=True)
  os._exit(0)  # pylint: disable=protected-access  (the services' threads need no goodbye)


if __name__ == "__main__":
  main()
