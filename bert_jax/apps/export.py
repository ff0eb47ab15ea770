r"""Export a trained workdir as a Hugging Face transformers directory (no torch needed).

  python -m bert_jax.export --workdir workdirs/polarity --output hf/polarity \
      [--checkpoint best|latest|STEP]

Writes config.json (`architectures`, `id2label` / `label2id` of the task's labels),
model.safetensors and the tokenizer files, so `AutoModelFor...from_pretrained(D)` and
`AutoTokenizer.from_pretrained(D)` load it with no code of ours:
  bert_pretraining  BertForPreTraining (BertForMaskedLM for an MLM-only run)
  classification    BertForSequenceClassification (problem_type regression for a score)
  ner               BertForTokenClassification
  squad             BertForQuestionAnswering
  lm                GPT2LMHeadModel (byte-level BPE tokenizer.json)
BERT exports carry vocab.txt + tokenizer.json + tokenizer_config.json. `best` is the
run's best checkpoint by its train.best_metric (the newest when it kept none).
Translation runs and classifiers on mean pooling have no transformers class that
computes them exactly: one line says why, as for an unknown workdir or a missing step
(exit code 2). Pretraining writes this export to <workdir>/hf at its end with
--config.export_hf=True.
"""
from __future__ import annotations

import os
import sys

from absl import app, flags
import ml_collections

from bert_jax import cli
from bert_jax.checkpoint import manager as checkpoint
from bert_jax.runtime import paths

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """The CLI's flags, defined only when it runs: main.run imports this module for
  config.export_hf, beside main.py's and translate.py's own --workdir."""
  flags.DEFINE_string("workdir", None, "A training workdir (checkpoints/<step>/...).")
  flags.DEFINE_string("output", None, "The transformers directory to write.")
  flags.DEFINE_string("checkpoint", "best", "best (by the run's best_metric) | latest | a step.")

# config.task -> what it becomes in transformers (hf_layout.MODELS, or "gpt2").
KINDS = {"bert_pretraining": "pretraining", "classification": "sequence_classification",
         "ner": "token_classification", "squad": "question_answering", "lm": "gpt2"}
# Tasks that train but cannot be exported, and why (one line each).
REFUSED = {
    "translation": "no transformers class computes our encoder-decoder exactly: the "
                   "closest, MarianMT, builds its own sinusoidal table with sin and cos in "
                   "halves where ours interleaves them (Vaswani et al. Sec. 3.5), and the "
                   "GRU model has no counterpart; translate with python -m bert_jax.translate",
    "word2vec": "word2vec writes its own vectors.txt / vectors.bin (gensim's formats) at "
                "the end of training; there is no transformers model to export",
}
MEAN_POOLING = ("a classifier on mean pooling has no transformers class: "
                "BertForSequenceClassification always classifies BERT's pooler output "
                "(tanh dense on [CLS]); train with --config.pooling=cls to export")


class ExportError(ValueError):
  """A workdir, checkpoint or model that cannot be exported (exit code 2)."""


def check_exportable(config, model: bool = False) -> None:
  """ExportError unless a run of `config` can be exported.

  model: also check that transformers' config can express config.model (pretraining and
  lm, whose architecture is config.model; fine-tuning's comes from init_from), as
  config.export_hf does before training.
  """
  if config.task in REFUSED:
    raise ExportError(f"{config.task}: {REFUSED[config.task]}.")
  if config.task not in KINDS:
    raise ExportError(f"config.task={config.task!r} has no export; exportable: "
                      f"{sorted(KINDS)}.")
  if config.task == "classification" and config.get("pooling", "cls") != "cls":
    raise ExportError(MEAN_POOLING + ".")
  if model and config.task in ("bert_pretraining", "lm"):
    from bert_jax.interop import gpt2, hf_config  # pylint: disable=g-import-not-at-top
    from bert_jax.train.defaults import transformer_config  # pylint: disable=g-import-not-at-top
    try:
      if config.task == "lm":
        gpt2.gpt2_config_dict(transformer_config(config))
      else:
        hf_config.hf_config_dict(transformer_config(config), [])
    except ValueError as e:
      raise ExportError(str(e)) from None


def export(workdir: str, output: str, which: str = "best") -> tuple[str, str]:
  """Writes the transformers directory `output` of a workdir's checkpoint.

  Returns (its architecture, e.g. "BertForSequenceClassification"; the step directory).
  """
  if not paths.resolve(workdir).exists():
    raise ExportError(f"workdir {workdir} does not exist.")
  out = paths.resolve(output)  # local or gs://: the interop writers go through epath
  if out.exists() and not out.is_dir():
    raise ExportError(f"--output {output} is a file: give a directory (new, empty, or an "
                      "earlier export).")
  if out.is_dir() and any(out.iterdir()) and not (out / "config.json").exists():
    raise ExportError(f"--output {output} is a non-empty directory that holds no earlier "
                      "export (no config.json): choose a new or empty directory.")
  directory, steps = checkpoint.checkpoint_steps(workdir)
  if not steps:
    raise ExportError(f"no checkpoint in {directory}: train first (python -m bert_jax.main "
                      f"--config ... --workdir {workdir}).")
  meta = checkpoint.read_meta(directory / str(steps[-1]))
  config = ml_collections.ConfigDict(meta.get("config") or {"task": meta.get("task")})
  check_exportable(config)
  try:
    step = checkpoint.select_step(directory, steps, which,
                                  (meta.get("config") or {}).get("train") or {})
  except ValueError as e:
    raise ExportError(str(e)) from None
  step_dir = str(directory / str(step))
  model_config, params, tokenizer_dir = checkpoint.load_params_for_inference(step_dir)
  kind = KINDS[config.task]
  if kind == "gpt2":
    from bert_jax.interop import gpt2  # pylint: disable=g-import-not-at-top
    tokenizer = gpt2.load_gpt2_tokenizer(_tokenizer_path(config, tokenizer_dir, step_dir))
    gpt2.save_gpt2(output, model_config, params, tokenizer)
    return "GPT2LMHeadModel", step_dir
  from bert_jax.interop import hf_save  # pylint: disable=g-import-not-at-top
  labels, regression = None, False
  if kind == "pretraining":
    from bert_jax.data.tokenizer import load_tokenizer  # pylint: disable=g-import-not-at-top
    d = config.data  # the tokenizer exactly as data/prepare.py loads it
    lowercase = d.get("lowercase") if d.get("vocab_path") else d.get("lowercase") is not False
    tokenizer = load_tokenizer(_tokenizer_path(config, tokenizer_dir, step_dir), lowercase)
  else:
    task = _finetune_task(config, step_dir)  # labels and tokenizer as the run had them
    tokenizer = task.tokenizer
    labels = getattr(task, "label_list", None)
    regression = bool(getattr(task, "regression", False))
  written = hf_save.save_hf_bert(output, model_config, params, tokenizer, model=kind,
                                 labels=labels, regression=regression)
  return written["architectures"][0], step_dir


def check_export_hf(config) -> None:
  """config.export_hf's check before training: a run that could not be exported fails
  at once (ValueError naming the flag), before anything runs or is written."""
  try:
    check_exportable(config, model=True)
  except ExportError as e:
    raise ValueError(f"config.export_hf=True: {e}") from None


def export_hf(workdir: str) -> None:
  """config.export_hf's export after a finished run: its best (else newest) checkpoint
  to <workdir>/hf (local or gs://), by process 0 only."""
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.train.writer import log  # pylint: disable=g-import-not-at-top
  if jax.process_index() != 0:  # one writer; the checkpoints are all saved by now
    return
  output = os.path.join(workdir, "hf")
  try:
    architecture, step_dir = export(workdir, output, "best")
  except (ValueError, FileNotFoundError) as e:  # the checkpoints stay: export them later
    raise ValueError(f"config.export_hf: the run finished but its export failed: {e}") from None
  log(f"export_hf: {step_dir} -> {output} ({architecture}; transformers' from_pretrained "
      "loads it)")


def _tokenizer_path(config, tokenizer_dir, step_dir: str) -> str:
  """The run's tokenizer: its data.vocab_path when one was given, else the meta's dir."""
  path = os.path.expanduser(config.get("data", {}).get("vocab_path") or tokenizer_dir or "")
  if not path or not paths.resolve(path).exists():
    raise ExportError(f"the tokenizer of {step_dir} ({path or 'none in its meta'}) is "
                      "missing; the export needs the run's vocabulary.")
  return path


def _finetune_task(config, step_dir: str):
  """The fine-tuning task of the run: its label list, regression flag and tokenizer (the
  workdir's copy), built as predict mode builds it; no weights are read."""
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  cfg = ml_collections.ConfigDict(config.to_dict())
  cfg.init_from = step_dir
  return registry.get_task(cfg)


def main(argv):
  if len(argv) > 1:
    print(f"export: unexpected arguments {argv[1:]}", file=sys.stderr)
    sys.exit(2)
  cli.library_logs_at_warning()
  for name in ("workdir", "output"):
    if not FLAGS[name].value:
      print(f"export: --{name} is required.", file=sys.stderr)
      sys.exit(2)
  try:
    architecture, step_dir = export(FLAGS.workdir, FLAGS.output, FLAGS.checkpoint)
  except (ExportError, FileNotFoundError, ValueError, checkpoint.CheckpointMismatchError) as e:
    print(f"export: error: {e}", file=sys.stderr)
    sys.exit(2)
  print(f"export: {step_dir} -> {FLAGS.output} ({architecture})", file=sys.stderr)


def entry():
  """Console script `bert-jax-export` (and `python -m bert_jax.export`)."""
  from bert_jax import hardware  # pylint: disable=g-import-not-at-top
  hardware.configure()  # before jax starts a backend
  _define_flags()
  from bert_jax.runtime import flag_help  # pylint: disable=g-import-not-at-top
  flag_help.key_flags_in_help(__name__)  # a console script's --help lists the flags too
  app.run(main)


if __name__ == "__main__":
  entry()
