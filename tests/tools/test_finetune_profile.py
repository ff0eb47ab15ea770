"""tools/finetune_profile.py's op buckets, on op names as the profiled step's HLO carries
them (jax op_name metadata, layer numbers dropped): no profiling, no timings."""
import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [os.path.join(_ROOT, "tools"), os.path.join(_ROOT, "bench")]
import finetune_profile  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

B = "jvp(BertForSequenceClassification)/bert/encoder/layers_*"
T = "transpose(jvp(BertForSequenceClassification))/bert/encoder/layers_*"


@pytest.mark.parametrize("src, is_dot, want", [
    (f"{T}/mlp/wo/dot_general", True, "dense matmul"),
    (f"{B}/attention/query/dot_general", True, "dense matmul"),
    (f"{B}/attention/bqhd,bkhd->bhqk/dot_general", True, "attention matmul (q.k, p.v)"),
    ("cond/branch_1_fun/add", False, "optimizer"),
    ("transpose(jvp(BertForSequenceClassification))/bert/embeddings/token_embedder/"
     "jit(_take)/broadcast_in_dim", False, "embedding table gradient"),
    (f"{B}/attention/stack", False, "dropout (random bits, masks)"),
    (f"{B}/Dropout_0/while", False, "dropout (random bits, masks)"),
    (f"{B}/attention/reduce_max", False, "softmax"),
    (f"{B}/mlp/erfc", False, "gelu"),
    (f"{B}/mlp_norm/mul", False, "layer norm"),
    (f"{B}/attention/value/add", False, "other"),  # a bias add
])
def test_category(src, is_dot, want):
  assert finetune_profile.category(src, is_dot).startswith(want)
