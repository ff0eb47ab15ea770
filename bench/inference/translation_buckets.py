"""Translation eval in length buckets vs padded to max_source / max_target: positions.

  .venv/bin/python bench/inference/translation_buckets.py --config numbers --steps 0 8 4
  .venv/bin/python bench/inference/translation_buckets.py --max-length 128 --steps 0 32

The config's eval split (numbers: the 500 validation pairs of the offline German ->
English number-word corpus, its own 256-id vocabulary learned as a run learns it), cut
into the eval batches the loop gets (task.eval_iterator, train.batch_size rows) padded
(data.length_bucket = 0) and in buckets of each --steps. For each: real source + target
subwords / computed positions (rows x (source + target columns), padding rows
included), the (source, target) shapes used (= compiles of the predict step), and the
decode buffer a batch searches over (min(max_target, S' + decode.max_extra_length)
positions a row). No timing: positions do not depend on the machine's load (printed
before and after anyway). --max-length L sets max_source/target_length (and model.max_len)
to L: the same pairs under the 128 limits of the file / tfds configs.

The result: bench/results/inference-translation_buckets[_<config>][_len<L>].json
(bench/results_io.py; the config other than numbers and --max-length in the name, so the
two commands above write two files): each step's real / computed positions, decode
buffer and shapes; the docstring states no goal, so none. --results-dir DIR writes it
there instead; --no-result only prints.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/

import bench_util  # noqa: E402  (bench/, the script's own directory)
import results_io  # noqa: E402  pylint: disable=wrong-import-position


def positions(task, batch_size: int) -> dict:
  """Real tokens, computed positions, decode positions and shapes of the eval batches."""
  real = computed = decode = 0
  shapes = set()
  extra = int(task.config.decode.max_extra_length)
  for batch in task.eval_iterator({}, batch_size, 0, 1):
    src, tgt = batch["src_ids"], batch["tgt_ids"]            # [B, S'], [B, T']
    real += int((src > 0).sum() + (tgt > 0).sum())
    computed += src.size + tgt.size
    decode += len(src) * min(task.max_target, src.shape[1] + extra)
    shapes.add((src.shape[1], tgt.shape[1]))
  return {"real": real, "computed": computed, "decode": decode, "shapes": sorted(shapes)}


def translation_result(args, pairs: str, rows: list, load_before: float) -> dict:
  """bench/results/inference-translation_buckets*.json: rows are (step, name, positions)."""
  figures, fills = [], {}
  for step, name, p in rows:
    fills[step] = 100 * p["real"] / p["computed"]
    figures.append(results_io.figure(f"{name}: real / computed positions",
                                     round(fills[step], 1), "%",
                                     f"{p['real']} / {p['computed']}"))
    figures.append(results_io.figure(f"{name}: decode buffer", p["decode"], "positions"))
    figures.append(results_io.figure(f"{name}: shapes (compiles)", len(p["shapes"]),
                                     "shapes", str(p["shapes"])))
  best = max((s for s in fills if s), key=lambda s: fills[s], default=None)
  parts = [f"{fills[0]:.0f}% of computed positions real padded"] if 0 in fills else []
  if best is not None:
    shapes = next(len(p["shapes"]) for s, _, p in rows if s == best)
    parts.append(f"{fills[best]:.0f}% in buckets of {best} ({shapes} shape"
                 f"{'s' if shapes != 1 else ''})")
  where = args.config + (f", max length {args.max_length}" if args.max_length else "")
  case = "translation_buckets" + (f"_{args.config}" if args.config != "numbers" else "") + (
      f"_len{args.max_length}" if args.max_length else "")
  return results_io.result(
      "inference", f"Translation eval length buckets ({where})", figures,
      "the same eval batches padded to max_source / max_target",
      f"{where} eval: " + " -> ".join(parts), case=case, load_before=load_before,
      notes=pairs + ". Positions, not timings: the machine's load does not change them.")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="numbers", help="configs/translation.py arg")
  parser.add_argument("--steps", type=int, nargs="+", default=[0, 4, 8],
                      help="data.length_bucket values (0: the padded path)")
  parser.add_argument("--max-length", type=int, default=0,
                      help="> 0: max_source/target_length and model.max_len")
  parser.add_argument("--results-dir", default=results_io.RESULTS_DIR,
                      help="where the result JSON goes (default bench/results)")
  parser.add_argument("--no-result", action="store_true", help="print only")
  args = parser.parse_args()
  bench_util.header("translation_buckets")
  load_before = results_io.load()
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from configs import translation  # pylint: disable=g-import-not-at-top
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for step in args.steps:
      c = translation.get_config(args.config)
      c.data.length_bucket = step
      if args.max_length:
        c.data.max_source_length = c.data.max_target_length = args.max_length
        c.model.max_len = max(c.model.max_len, args.max_length)
      task = registry.get_task(c)
      task.prepare(tmp)  # the first learns the vocabulary, the others reuse it
      src = (task.eval_source.src_ids > 0).sum(1)
      tgt = (task.eval_source.tgt_ids > 0).sum(1)
      if step == args.steps[0]:
        pairs = (f"{len(src)} eval pairs, batch {c.train.batch_size}: source subwords "
                 f"{src.min()}-{src.max()} (mean {src.mean():.2f}) of {task.max_source}, "
                 f"target {tgt.min()}-{tgt.max()} (mean {tgt.mean():.2f}) of "
                 f"{task.max_target}")
        print(pairs)
      p = positions(task, int(c.train.batch_size))
      name = "padded" if not task.bucketed else (
          f"buckets of {step}: source {task.source_buckets.tolist()}, target "
          f"{task.target_buckets.tolist()}")
      rows.append((step if task.bucketed else 0, name.split(":")[0], p))
      print(f"{name}\n  real / computed positions {p['real']} / {p['computed']} = "
            f"{100 * p['real'] / p['computed']:.1f}%  decode buffer {p['decode']} "
            f"positions  shapes (compiles) {len(p['shapes'])}: {p['shapes']}", flush=True)
  print(bench_util.load_line("end"))
  res = translation_result(args, pairs, rows, load_before)
  print(res["title"], "-", res["headline"])
  if not args.no_result:
    print("wrote", results_io.write(res, args.results_dir))


if __name__ == "__main__":
  main()
