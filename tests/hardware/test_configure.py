"""hardware.configure: the platform settled by the environment it is given."""
import pytest

from bert_jax import hardware


@pytest.mark.parametrize("platform,backend", [("tpu", "accelerator"), ("cuda", "accelerator"),
                                              ("tpu,cpu", "accelerator"), ("cpu", "cpu")])
def test_the_backend_follows_jax_platforms(platform, backend):
  env = {"JAX_PLATFORMS": platform}
  assert hardware.configure(environ=env) == backend
  assert env["JAX_PLATFORMS"] == platform        # a user's choice is kept
  assert env["EPATH_USE_TF"] == "false"         # gs:// through gcsfs on every backend


def test_a_users_epath_choice_is_kept():
  env = {"JAX_PLATFORMS": "tpu", "EPATH_USE_TF": "true"}
  hardware.configure(environ=env)
  assert env["EPATH_USE_TF"] == "true"
