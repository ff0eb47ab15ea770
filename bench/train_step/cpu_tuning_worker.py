"""cpu_tuning.py's worker: one BERT pretraining step timed with the bert_jax of a tree.

  python bench/train_step/cpu_tuning_worker.py TREE VARIANT BATCH SEQ STEPS [PARTS_DIR]

TREE's bert_jax is imported (the venv's editable install is set aside), its train step
built as bench/device_check_parts.time_train_step builds it (PARTS_DIR's, default TREE's
bench/: a commit whose bench/ was not committed with its code takes today's), in float32
with BERT's dropout, the tree's own defaults for this CPU; prints `RESULT {json}`.
"""
import json
import os
import sys

TREE, VARIANT = sys.argv[1], sys.argv[2]
BATCH, SEQ, STEPS = (int(a) for a in sys.argv[3:6])
PARTS = sys.argv[6] if len(sys.argv) > 6 else os.path.join(TREE, "bench")
sys.path[:0] = [TREE, PARTS]
# The venv's editable install finds bert_jax before sys.path does: TREE's must win.
sys.meta_path = [f for f in sys.meta_path
                 if not getattr(f, "__module__", "").startswith("__editable__")]

try:
  from bert_jax import hardware  # pylint: disable=g-import-not-at-top
  hardware.configure()  # what the entry points do
except ImportError:
  pass  # an older tree: importing bert_jax (below) settles the platform

import ml_collections  # noqa: E402  pylint: disable=g-import-not-at-top

import bert_jax  # noqa: E402  pylint: disable=g-import-not-at-top
import device_check_parts as parts  # noqa: E402  pylint: disable=g-import-not-at-top
from bert_jax.train.defaults import base_config, model_config, train_config  # noqa: E402

config = base_config("bert_pretraining")
config.model = model_config(VARIANT)  # the tree's own defaults on this CPU
config.data = ml_collections.ConfigDict(dict(
    mode="nsp", max_seq_length=SEQ, max_predictions_per_seq=max(1, SEQ * 15 // 100)))
config.train = train_config(batch_size=BATCH, num_steps=1000, warmup_steps=10)
timed = parts.time_train_step("cpu_tuning", config, "bert", STEPS, "/tmp/bert_jax_cpu_tuning")
print("RESULT " + json.dumps({"step_s": timed["step_s"], "compile_s": timed["compile_s"],
                              "loss": timed["first_loss"], "bert_jax": bert_jax.__file__}))
