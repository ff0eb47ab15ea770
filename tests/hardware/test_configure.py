"""hardware.configure: what the entry points turn on, only on the CPU backend."""
import pytest

from bert_jax import hardware
from bert_jax.hardware import host_malloc
from bert_jax.layers import dense


@pytest.fixture()
def calls(monkeypatch):
  seen = []
  monkeypatch.setattr(host_malloc, "reexec_with_huge_pages", lambda: seen.append("malloc"))
  saved = list(dense._GRAD_2D)  # pylint: disable=protected-access
  dense.install_grad_2d(None)
  yield seen
  dense._GRAD_2D[:] = saved  # pylint: disable=protected-access


@pytest.mark.parametrize("platform", ["tpu", "cuda", "tpu,cpu"])
def test_an_accelerator_gets_no_cpu_tuning(calls, platform):
  env = {"JAX_PLATFORMS": platform}
  assert hardware.configure(malloc=True, environ=env) == "accelerator"
  assert calls == [] and dense._GRAD_2D == []  # pylint: disable=protected-access
  assert env["EPATH_USE_TF"] == "false"  # gs:// through gcsfs on every backend


def test_the_cpu_backend_gets_it_and_malloc_only_when_asked(calls):
  assert hardware.configure(environ={"JAX_PLATFORMS": "cpu"}) == "cpu"
  assert calls == [] and len(dense._GRAD_2D) == 1  # pylint: disable=protected-access
  assert hardware.configure(malloc=True, environ={"JAX_PLATFORMS": "cpu"}) == "cpu"
  assert calls == ["malloc"]


def test_a_users_epath_choice_is_kept(calls):
  env = {"JAX_PLATFORMS": "tpu", "EPATH_USE_TF": "true"}
  hardware.configure(environ=env)
  assert env["EPATH_USE_TF"] == "true"
