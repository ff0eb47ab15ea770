"""One host of tests/data/test_hosts.py's two-process pod: joins the JAX job, prepares
BERT's data through the task (process 0 builds, the other waits and reads), and prints
one JSON line of what it got: the vocabulary's sha256, its instance files' digests and
the instance indices of its share of one epoch.

  python -m tests.data.pod_host COORDINATOR PROCESS_ID DATA_DIR CACHE_DIR [fail|die|slow]

`fail`: process 0's preparation raises; `die`: process 0 dies in it without a word;
`slow`: it starts 10 s late (process 1 waits 3 s).
"""
import hashlib
import json
import os
import sys
import time


def main(coordinator: str, process_id: int, data_dir: str, cache_dir: str, fault: str):
  import faulthandler  # pylint: disable=g-import-not-at-top
  faulthandler.dump_traceback_later(float(os.environ.get("POD_HOST_DUMP_AFTER", "240")))
  import jax  # pylint: disable=g-import-not-at-top
  jax.distributed.initialize(coordinator, 2, process_id, initialization_timeout=120)
  from bert_jax.data import prepare, sampling  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.pretraining import PretrainingTask  # pylint: disable=g-import-not-at-top
  from tests.train.test_loop import e2e_config  # pylint: disable=g-import-not-at-top
  config = e2e_config(data_dir)
  config.data.cache_dir = cache_dir
  if fault == "slow":
    config.data.prepare_timeout = 3
  if process_id == 0 and fault:
    real = prepare.prepare_named

    def broken(cfg, verbose=True):
      if fault == "fail":
        raise ValueError("the corpus is broken on process 0")
      if fault == "die":  # killed mid-preparation: no error to pass on
        os._exit(9)
      time.sleep(10)
      return real(cfg, verbose)
    prepare.prepare_named = broken
  task = PretrainingTask(config)
  task.prepare("unused")
  prepared = next(iter(task._prepared.values()))  # pylint: disable=protected-access
  with open(prepared.vocab_path, "rb") as f:
    vocab = hashlib.sha256(f.read()).hexdigest()
  files = {}
  for d, _, names in os.walk(prepared.instances_dir):
    for name in names:
      with open(os.path.join(d, name), "rb") as f:
        files[os.path.relpath(os.path.join(d, name), prepared.instances_dir)] = \
            hashlib.sha256(f.read()).hexdigest()
  # This host's share of epoch 0 as the loader draws it (make_train_iterator's keys),
  # and one batch through the iterator itself: the files are readable here.
  batch = config.train.batch_size // 2
  n = prepared.num_examples["train"]
  keys = sampling.TrainKeys(n, batch, jax.process_index(), 2, config.data.seed)
  steps = -(-n // (2 * batch))  # through the end of epoch 0
  indices = sorted(int(i) for j in range(steps) for e, i in keys(j) if e == 0)
  first = next(task.train_iterator({}, batch, jax.process_index(), 2, config.data.seed))
  print(json.dumps(dict(process=jax.process_index(), vocab=vocab, files=files, n=n,
                        indices=indices, instances_dir=prepared.instances_dir,
                        batch_rows=len(first["input_ids"]))), flush=True)


if __name__ == "__main__":
  args = sys.argv[1:]
  main(args[0], int(args[1]), args[2], args[3], args[4] if len(args) > 4 else "")
