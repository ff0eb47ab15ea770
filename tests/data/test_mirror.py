"""bert_jax/data/mirror.py's guard on object names: a copy never writes outside its level
(tests/test_gcs.py runs the mirror itself against a fake GCS server)."""
from bert_jax.data import mirror


def test_object_names_that_leave_the_level_are_refused():
  root = "/cache/gs/bucket/level"
  assert mirror.inside(root, "instances/shard-0.array_record")
  assert mirror.inside(root, "a/./b")
  for bad in ("../x", "a/../../x", "/etc/passwd", "", "a/../..", ".."):
    assert not mirror.inside(root, bad), bad
