"""hardware/cpu_threads.py: it leaves a started backend alone (the private check it
reads still exists in this jax), and word2vec's trainer reaches it."""
import jax

from bert_jax.hardware import cpu_threads


def test_an_already_started_backend_is_left_alone():
  jax.devices()  # the test process's backend is up
  assert cpu_threads.start_cpu_backend_single_threaded() is False


def test_word2vec_takes_it_from_hardware():
  from bert_jax.word2vec import train  # pylint: disable=g-import-not-at-top
  assert train.cpu_threads is cpu_threads
