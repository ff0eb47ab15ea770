"""One host of tests/data/test_hosts.py's two-process pod: joins the JAX job, prepares
BERT's data through the task (process 0 builds, the other waits and reads), and prints
one JSON line of what it got: the vocabulary's sha256, its instance files' digests and
the instance indices of its share of one epoch.

  python -m tests.data.pod_host COORDINATOR PROCESS_ID DATA_DIR CACHE_DIR [fail|die|slow]

`fail`: process 0's preparation raises; `die`: process 0 dies in it without a word;
`slow`: it starts 10 s late (process 1 waits 3 s); `lm`: GPT's LM data instead (lm_main),
each host's data_dir on its own disk (CACHE_DIR/data).
"""
import hashlib
import json
import os
import sys
import time


def _sha(path: str) -> str:
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def lm_main(cache_dir: str):
  """GPT's lm task prepares on two hosts that share no disk: prints the sha256 of the
  tokenizer.json and of the train stream each host ends with. Process 1 must not train
  a BPE: its train_bpe raises."""
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks import registry  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.lm import data as data_lib  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from bert_jax.train.defaults import base_config, train_config  # pylint: disable=g-import-not-at-top
  from tests.data.conftest import _TESTDATA  # pylint: disable=g-import-not-at-top
  if jax.process_index() == 1:
    def trains(*_):
      raise AssertionError("process 1 trained a BPE of its own")
    data_lib.train_bpe = trains
  config = base_config("lm")
  config.model = ml_collections.ConfigDict(dict(
      variant="gpt/small", vocab_size=300, hidden_size=32, num_heads=4, num_layers=1,
      mlp_dim=64, max_len=16, dropout_rate=0.0, attention_dropout_rate=0.0))
  config.train = train_config(batch_size=8, num_steps=2)
  config.data = _gpt_data_config()
  config.data.update(corpus="text", data_dir=os.path.join(cache_dir, "data"),
                     text_files=f"{_TESTDATA}/tiny_corpus.txt,{_TESTDATA}/paragraphs.txt")
  task = registry.get_task(config)
  task.prepare("unused")
  print(json.dumps(dict(process=jax.process_index(), tokenizer=_sha(task.data.tokenizer_path),
                        tokens=_sha(os.path.join(task.data.streams_dir, "train",
                                                 "tokens.npy")),
                        streams_dir=task.data.streams_dir)), flush=True)


def _gpt_data_config():
  import importlib.util  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  spec = importlib.util.spec_from_file_location("configs_gpt", f"{root}/configs/gpt.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.data_config("text", vocab_size=300, seq_len=16)


def main(coordinator: str, process_id: int, data_dir: str, cache_dir: str, fault: str):
  import faulthandler  # pylint: disable=g-import-not-at-top
  faulthandler.dump_traceback_later(float(os.environ.get("POD_HOST_DUMP_AFTER", "240")))
  import jax  # pylint: disable=g-import-not-at-top
  jax.distributed.initialize(coordinator, 2, process_id, initialization_timeout=120)
  if fault == "lm":
    return lm_main(cache_dir)
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
  vocab = _sha(prepared.vocab_path)
  files = {os.path.relpath(os.path.join(d, name), prepared.instances_dir):
           _sha(os.path.join(d, name))
           for d, _, names in os.walk(prepared.instances_dir) for name in names}
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
