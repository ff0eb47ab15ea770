r"""Export a trained workdir as a Hugging Face transformers directory (no torch needed).

  python -m bert_jax.export --workdir workdirs/polarity --output hf/polarity \
      [--checkpoint best|latest|STEP] [--overwrite]

Writes config.json (`architectures`, `id2label` / `label2id` of the task's labels),
model.safetensors and the tokenizer files, so `AutoModelFor...from_pretrained(D)` and
`AutoTokenizer.from_pretrained(D)` load it with no code of ours:
  bert_pretraining  BertForPreTraining (BertForMaskedLM for an MLM-only run;
                    ModernBertForMaskedLM for model.family modernbert)
  classification    BertForSequenceClassification (problem_type regression for a score)
  ner               BertForTokenClassification
                    (ModernBertFor{Sequence,Token}Classification from a ModernBERT)
  squad             BertForQuestionAnswering
  lm                GPT2LMHeadModel (byte-level BPE tokenizer.json)
BERT exports carry vocab.txt + tokenizer.json + tokenizer_config.json. `best` is the
run's best checkpoint by its train.best_metric (the newest when it kept none).
Translation runs and BERT classifiers on mean pooling have no transformers class that
computes them exactly: one line says why, as for an unknown workdir or a missing step
(exit code 2). An --output that already holds a model (config.json) is refused unless
--overwrite; the files are written beside it and moved in at the end, config.json last,
so a failure never leaves a directory that loads as a mix of two models. Pretraining
writes this export to <workdir>/hf at its end with --config.export_hf=True.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile

from absl import app, flags
import ml_collections

from bert_jax import cli
from bert_jax import guards
from bert_jax.checkpoint import manager as checkpoint
from bert_jax.runtime import paths

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """The CLI's flags, defined only when it runs: main.run imports this module for
  config.export_hf, beside main.py's and translate.py's own --workdir."""
  flags.DEFINE_string("workdir", None, "A training workdir (checkpoints/<step>/...).")
  flags.DEFINE_string("output", None, "The transformers directory to write.")
  flags.DEFINE_string("checkpoint", "best", "best (by the run's best_metric) | latest | a step.")
  flags.DEFINE_bool("overwrite", False, "Replace the model an --output directory already "
                    "holds (refused without it).")

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


def check_exportable(config, model: bool = False, family: str | None = None) -> None:
  """ExportError unless a run of `config` can be exported.

  model: also check that transformers' config can express config.model (pretraining and
  lm, whose architecture is config.model; fine-tuning's comes from init_from), as
  config.export_hf does before training. family: the run's encoder family (None: that
  of its init_from); a ModernBERT classifier pools as its config.json says, mean or cls.
  """
  if config.task in REFUSED:
    raise ExportError(f"{config.task}: {REFUSED[config.task]}.")
  if config.task not in KINDS:
    raise ExportError(f"config.task={config.task!r} has no export; exportable: "
                      f"{sorted(KINDS)}.")
  if config.task == "classification" and config.get("pooling", "cls") != "cls":
    if (family or _init_family(config)) != "modernbert":
      raise ExportError(MEAN_POOLING + ".")
  if model and config.task in ("bert_pretraining", "lm"):
    from bert_jax.interop import gpt2, hf_config  # pylint: disable=g-import-not-at-top
    from bert_jax.train.defaults import transformer_config  # pylint: disable=g-import-not-at-top
    try:
      model_config = transformer_config(config)
      if config.task == "lm":
        gpt2.gpt2_config_dict(model_config)
      elif model_config.family == "modernbert":
        from bert_jax.interop import modernbert_save  # pylint: disable=g-import-not-at-top
        modernbert_save.check_modernbert_compatible(model_config)
      else:
        hf_config.hf_config_dict(model_config, [])
    except ValueError as e:
      raise ExportError(str(e)) from None


# What an export writes; a directory holding only these (no config.json) is an export a
# failure or a kill cut short, which --overwrite may finish.
EXPORT_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json",
                "tokenizer_config.json")


def check_output(workdir: str, output: str, overwrite: bool = False) -> None:
  """ExportError (one line) for an --output the export must not write: a file, the
  workdir or a directory holding it, a directory holding a model (config.json) unless
  `overwrite`, or one holding other files. Nothing is written before this passes."""
  out = paths.resolve(output)  # local or gs://: the interop writers go through epath
  if guards.covers(output, workdir):
    raise ExportError(f"--output {output} is or holds the workdir {workdir}: give another "
                      f"directory (e.g. {os.path.join(workdir, 'hf')}).")
  if out.exists() and not out.is_dir():
    raise ExportError(f"--output {output} is a file: give a directory (new, empty, or an "
                      "earlier export with --overwrite).")
  names = {p.name for p in out.iterdir()} if out.is_dir() else set()
  if "config.json" in names and not overwrite:
    raise ExportError(f"--output {output} already holds a model (config.json): pass "
                      "--overwrite to replace it, or choose a new directory.")
  others = sorted(names - set(EXPORT_FILES))
  if others and not (overwrite and "config.json" in names):  # a model's own extras stay
    raise ExportError(f"--output {output} holds files an export does not write "
                      f"({', '.join(others[:3])}): choose a new or empty directory.")
  if names and not overwrite:
    raise ExportError(f"--output {output} holds an unfinished export (no config.json): "
                      "pass --overwrite to replace it.")


def export(workdir: str, output: str, which: str = "best",
           overwrite: bool = False) -> tuple[str, str]:
  """Writes the transformers directory `output` of a workdir's checkpoint.

  The export is written whole in a staging directory (beside a local `output`, a local
  temporary for gs://) and its files moved or uploaded in at the end, config.json last
  (removed first when an export is replaced): a failure leaves the old model whole, or a
  directory without config.json, never a mix that loads.
  Returns (its architecture, e.g. "BertForSequenceClassification"; the step directory).
  """
  if not paths.resolve(workdir).exists():
    raise ExportError(f"workdir {workdir} does not exist.")
  check_output(workdir, output, overwrite)
  directory, steps = checkpoint.checkpoint_steps(workdir)
  if not steps:
    raise ExportError(f"no checkpoint in {directory}: train first (python -m bert_jax.main "
                      f"--config ... --workdir {workdir}).")
  meta = checkpoint.read_meta(directory / str(steps[-1]))
  config = ml_collections.ConfigDict(meta.get("config") or {"task": meta.get("task")})
  check_exportable(config, family=(meta.get("model_config") or {}).get("family", "bert"))
  try:
    step = checkpoint.select_step(directory, steps, which,
                                  (meta.get("config") or {}).get("train") or {})
  except ValueError as e:
    raise ExportError(str(e)) from None
  step_dir = str(directory / str(step))
  model_config, params, tokenizer_dir = checkpoint.load_params_for_inference(step_dir)
  with _staged(output) as target:
    architecture = _write(config, step_dir, target, model_config, params, tokenizer_dir)
  return architecture, step_dir


@contextlib.contextmanager
def _staged(output: str):
  """The directory to write the export into; its files land in `output` at the end."""
  remote = paths.is_remote(output)
  out = output if remote else os.path.realpath(output)  # a symlink: stage where it points
  if not remote:
    os.makedirs(os.path.dirname(out), exist_ok=True)
  # Beside a local output (renames stay on its filesystem); a local temporary for gs://.
  staging = tempfile.mkdtemp(dir=None if remote else os.path.dirname(out),
                             prefix=f".{os.path.basename(out.rstrip('/'))}.export-")
  try:
    yield staging  # every check and the whole model written here first
    target = paths.resolve(out)
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").unlink(missing_ok=True)  # from here on, no loadable mix
    for name in sorted(os.listdir(staging), key=lambda n: n == "config.json"):
      if remote:  # each upload is whole
        with open(os.path.join(staging, name), "rb") as f:
          paths.write_atomically(str(target / name), f.read())
      else:
        os.replace(os.path.join(staging, name), os.path.join(out, name))
  finally:
    shutil.rmtree(staging, ignore_errors=True)


def _write(config, step_dir: str, output: str, model_config, params, tokenizer_dir) -> str:
  """Writes the checkpoint's transformers files into `output`; returns the architecture."""
  kind = KINDS[config.task]
  if kind == "gpt2":
    from bert_jax.interop import gpt2  # pylint: disable=g-import-not-at-top
    tokenizer = gpt2.load_gpt2_tokenizer(_tokenizer_path(config, tokenizer_dir, step_dir))
    gpt2.save_gpt2(output, model_config, params, tokenizer)
    return "GPT2LMHeadModel"
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
  if model_config.family == "modernbert":  # ModernBertForMaskedLM (or a classifier)
    if kind == "question_answering":
      raise ExportError(f"{config.task}: a ModernBERT export has masked-LM and "
                        "classification heads only.")
    from bert_jax.interop import modernbert_save  # pylint: disable=g-import-not-at-top
    written = modernbert_save.save_modernbert(
        output, model_config, params, tokenizer,
        model="masked_lm" if kind == "pretraining" else kind, labels=labels,
        regression=regression)
    return written["architectures"][0]
  written = hf_save.save_hf_bert(output, model_config, params, tokenizer, model=kind,
                                 labels=labels, regression=regression)
  return written["architectures"][0]


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
    architecture, step_dir = export(workdir, output, "best", overwrite=True)  # its own
  except (ValueError, FileNotFoundError) as e:  # the checkpoints stay: export them later
    raise ValueError(f"config.export_hf: the run finished but its export failed: {e}") from None
  log(f"export_hf: {step_dir} -> {output} ({architecture}; transformers' from_pretrained "
      "loads it)")


def _init_family(config) -> str:
  """The encoder family a fine-tuning run of `config` starts from (its init_from's;
  "bert" when that cannot be read: the run itself then says why)."""
  from bert_jax.checkpoint import pretrained  # pylint: disable=g-import-not-at-top
  if not config.get("init_from"):
    return (config.get("model") or {}).get("family") or "bert"
  try:
    return pretrained.load_encoder(config.init_from, with_params=False)[0].family
  except (ValueError, FileNotFoundError):
    return "bert"


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
    architecture, step_dir = export(FLAGS.workdir, FLAGS.output, FLAGS.checkpoint,
                                    FLAGS.overwrite)
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
