"""The result file of bench/word2vec/vs_gensim.py: every side's means over the seeds and
the goal against gensim with workers 2 (numpy and bench/results_io.py only, no jax)."""
import numpy as np

import results_io


def result(rows: dict, order: str, load_before: float) -> dict:
  """The result file: every side's means; the goal against gensim with workers 2."""
  figures, stats = [], {}
  for side, rs in rows.items():
    for key, unit in (("wordsim353", "Spearman"), ("simlex999", "Spearman"),
                      ("analogy", "accuracy"), ("words_per_sec", "words/s")):
      v = np.asarray([r[key] for r in rs], np.float64)
      stats[side, key] = (float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0)
      digits = 0 if key == "words_per_sec" else 4
      figures.append(results_io.figure(
          f"{side} {key}", round(float(v.mean()), digits), unit,
          f"sd {stats[side, key][1]:.{digits}f}, {v.size} seeds"))
  met = None
  if ("ours", "wordsim353") in stats and ("gensim-w2", "wordsim353") in stats:
    met = bool(all(abs(stats["ours", k][0] - stats["gensim-w2", k][0])
                   <= stats["gensim-w2", k][1] for k in ("wordsim353", "simlex999"))
               and stats["ours", "analogy"][0] >= stats["gensim-w2", "analogy"][0] - 0.003)
  headline = ", ".join(
      f"{label} {stats['ours', k][0]:.3f} vs {stats['gensim-w2', k][0]:.3f}"
      for k, label in (("wordsim353", "WS353"), ("simlex999", "SimLex"))
  ) if met is not None else "ours only"
  gensim = [s.split("-w")[1] for s in rows if s.startswith("gensim")]
  return results_io.result(
      "word2vec_vs_gensim", "word2vec vs gensim", figures,
      f"gensim's Word2Vec (workers {' and '.join(gensim) or 'none'}), same corpus and "
      "hyper-parameters",
      headline + f" ({len(rows[next(iter(rows))])} seeds, {order})",
      goal_=results_io.goal("quality equal to gensim's (workers 2)",
                            "WS353, SimLex means within one gensim sd; analogy >= gensim's "
                            "- 0.003", met), load_before=load_before)
