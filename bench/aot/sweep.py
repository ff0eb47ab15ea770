"""The AOT sweep as a bench suite: `launch/sweep.py --aot`'s points, compiled for a TPU
topology (libtpu, no TPU), written to bench/results/aot_sweep.json.

  python bench/aot/sweep.py --config configs/bert_large.py:s512 --topology v5e-256 \
      --where 'config.model.remat_policy=full|dots_no_batch' \
      --where config.train.batch_size=4096

It compiles what `launch/sweep.py --config C --aot T --where ...` compiles (the same
rows, from launch/sweep_aot.py), prints the same table, and writes one result: per
strategy (mesh, remat) whether it fits, its HBM and temporaries per chip at its largest
fitting batch; then two ratios read from those rows, both per chip at the same batch:
remat full's temporaries over dots_no_batch's on each sharded mesh, and each mesh's
activations over plain fsdp's. `--jsonl F` keeps the rows as they come (a stopped run,
rerun, resumes), as in launch/sweep.py.
"""
from __future__ import annotations

import argparse
import os
import sys

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(_BENCH)
sys.path[:0] = [_ROOT, _BENCH, os.path.join(_ROOT, "launch")]

from bert_jax import hardware  # noqa: E402

hardware.configure()  # an entry point: the platform settled as the CLIs settle it
import results_io  # noqa: E402
import sweep_aot  # noqa: E402  (launch/)
import sweep_points as points  # noqa: E402  (launch/)

GIB = 2 ** 30
MESH_KEY, REMAT_KEY = "config.mesh_shape", "config.model.remat_policy"
NAMES = {"configs/bert_large.py:s512": "BERT-large S512"}  # the title (RESULTS' anchor)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--config", default="configs/bert_large.py:s512")
  p.add_argument("--topology", default="v5e-256")
  p.add_argument("--where", action="append", default=[], metavar="KEY=V1|V2",
                 help="only these points (as launch/sweep.py --where)")
  p.add_argument("--jsonl", default="", help="keep each point's row here as it comes")
  p.add_argument("--results-dir", default=results_io.RESULTS_DIR)
  p.add_argument("--no-result", action="store_true", help="write no result file")
  args = p.parse_args(argv)
  load_before = results_io.load()
  rows = sweep_aot.aot_rows(args.config, args.topology, [], args.jsonl, tuple(args.where))
  print(sweep_aot.aot_table(rows, args.topology), flush=True)
  if not args.no_result:
    print("wrote", results_io.write(sweep_result(args, rows, load_before), args.results_dir))
  return 0


def _largest(rows: list[dict]) -> dict:
  """strategy -> the fitting row of its largest batch (None where none fits)."""
  best = {}
  for r in rows:
    s = points.strategy(r["overrides"])
    best.setdefault(s, None)
    if r.get("fits") and r.get("hbm"):
      cur = best[s]
      if cur is None or (r["overrides"].get(points.BATCH_KEY, 0)
                         > cur["overrides"].get(points.BATCH_KEY, 0)):
        best[s] = r
  return best


def _by(rows: list[dict]) -> dict:
  """(mesh, remat, batch) as table cells -> the fitting row."""
  return {(points.cell(r["overrides"].get(MESH_KEY, "")),
           points.cell(r["overrides"].get(REMAT_KEY, "")),
           r["overrides"].get(points.BATCH_KEY)): r
          for r in rows if r.get("fits") and r.get("hbm")}


def ratios(rows: list[dict]) -> tuple[list[float], list[float]]:
  """(remat full / dots_no_batch temporaries on every mesh but plain data parallel,
  each mesh's temporaries / fsdp's (-1x8x1) at the same remat and batch), per chip."""
  by = _by(rows)
  remat, mesh = [], []
  for (m, remat_policy, batch), r in by.items():
    temp = r["hbm"].get("temporaries")
    other = by.get((m, "dots_no_batch", batch))
    if remat_policy == "full" and m != "-1x1x1" and other and temp:
      remat.append(temp / other["hbm"]["temporaries"])
    fsdp = by.get(("-1x8x1", remat_policy, batch))
    if m not in ("-1x8x1", "-1x1x1") and fsdp and temp:
      mesh.append(temp / fsdp["hbm"]["temporaries"])
  return remat, mesh


def _span(values: list[float]) -> str:
  return f"{min(values):.2f}-{max(values):.2f}" if values else "none compiled"


def sweep_result(args, rows: list[dict], load_before: float) -> dict:
  figures = []
  for s, r in _largest(rows).items():
    name = ", ".join(s)
    if r is None:
      figures.append(results_io.figure(f"{name}: largest batch", 0, "rows",
                                       "none of the swept fits"))
      continue
    figures += [results_io.figure(f"{name}: largest batch", r["overrides"][points.BATCH_KEY],
                                  "rows"),
                results_io.figure(f"{name}: HBM per chip at it",
                                  round(r["hbm"]["total"] / GIB, 2), "GiB",
                                  f"temporaries {r['hbm'].get('temporaries', 0) / GIB:.2f}")]
  remat, mesh = ratios(rows)
  figures += [results_io.figure("remat full / dots_no_batch temporaries, sharded meshes",
                                _span(remat), "x"),
              results_io.figure("each sharded mesh's / fsdp's (-1x8x1) temporaries",
                                _span(mesh), "x")]
  fitting = [r for r in _largest(rows).values() if r is not None]
  headline = (f"{len(fitting)} of {len(_largest(rows))} strategies fit; remat full / "
              f"dots_no_batch temporaries {_span(remat)}x sharded")
  return results_io.result(
      "aot_sweep", f"AOT sweep: {NAMES.get(args.config, args.config)} per strategy", figures,
      "the other strategies of the same sweep", headline, load_before=load_before,
      notes="Compiled here by libtpu without a TPU: memory is the compiler's; compile "
            "seconds (in the table) are this CPU's.") | {
          "hardware": f"AOT, {args.topology} (libtpu on a CPU host)"}


if __name__ == "__main__":
  sys.exit(main())
