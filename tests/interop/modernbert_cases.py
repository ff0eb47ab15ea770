"""The ModernBERT interop fixtures' paths, and our exports of them.

tests/testdata/hf/modernbert_* come from scripts/make_modernbert_fixtures.py (transformers
4.57.6), whose second step runs this module in the main venv:

  python -m tests.interop.modernbert_cases OUT_DIR

to write our exports (`write_exports`) for transformers to load; test_modernbert.py writes
them again and checks that they are byte for byte what transformers ran.
"""
import os
import sys

from bert_jax.interop import modernbert
from bert_jax.interop import modernbert_save

HF_DATA = os.path.join(os.path.dirname(__file__), "..", "testdata", "hf")
TINY = os.path.join(HF_DATA, "modernbert_tiny")        # ForMaskedLM, no biases, + tokenizer
TINY_BF16 = os.path.join(HF_DATA, "modernbert_tiny_bf16")
BIAS = os.path.join(HF_DATA, "modernbert_bias")        # ForSequenceClassification, biases
OUTPUTS = os.path.join(HF_DATA, "modernbert_outputs.npz")
EXPORT_OUTPUTS = os.path.join(HF_DATA, "modernbert_export.npz")
LABELS = {"sequence_classification": ["negative", "neutral", "positive"],
          "token_classification": ["O", "B-X", "I-X"]}
# The export source of each kind: a fixture loaded by our loader, the vocabulary padded
# to 192 rows (vocab_multiple 96) so that the export cuts it back to transformers' 128.
EXPORTS = {"masked_lm": TINY, "sequence_classification": BIAS, "token_classification": BIAS}


def write_exports(out: str) -> dict:
  """out/<kind>: our export of EXPORTS[kind]; returns {kind: (config, params)}."""
  written = {}
  for kind, source in EXPORTS.items():
    config, params = modernbert.load_modernbert(source, model=kind, vocab_multiple=96)
    tokenizer = TINY if kind == "masked_lm" else None
    modernbert_save.save_modernbert(os.path.join(out, kind), config, params, tokenizer,
                                    model=kind, labels=LABELS.get(kind))
    written[kind] = config, params
  return written


if __name__ == "__main__":
  write_exports(sys.argv[1])
