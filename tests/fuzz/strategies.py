"""Shared hypothesis strategies and the one contract every fuzzed reader must keep.

The contract (issue 15, point 6): a reader given any bytes either returns its records
with the bad ones counted in a SkipLog, or raises ONE ValueError / FileNotFoundError
whose message names the file. Any other exception type is a bug in the reader.
"""
from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, settings, strategies as st

from bert_jax.tasks.skiplog import SkipLog

# Small, bounded suites: every fuzz file together stays well under 30 s on CI.
FUZZ = settings(max_examples=50, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# Pieces a hostile or broken file is made of: separators, quotes, invalid UTF-8
# (a lone continuation byte, a truncated 3-byte sequence, latin-1), NUL, BOM, CRLF.
_ATOMS = [b"\t", b",", b'"', b"'", b"\n", b"\r\n", b"\r", b" ", b"\x00", b"\xff",
          b"\x80", b"\xe2\x82", b"\xef\xbb\xbf", b"\xe9", b"{", b"}", b"[", b"]", b":",
          b"-DOCSTART-", b"O", b"B-PER", b"label", b"sentence", b"1", b"[UNK]"]
chunks = st.one_of(
    st.sampled_from(_ATOMS),
    st.text(max_size=12).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=12),
)
# Any file content; now and then one huge line (over csv's 128 KiB field limit).
file_bytes = st.one_of(
    st.lists(chunks, max_size=40).map(b"".join),
    st.just(b""),
    st.integers(1, 3).map(lambda k: b"x" * (140_000 * k) + b"\n"),
    st.binary(max_size=200),
)


def json_values(keys):
  """JSON values of every type, dict keys drawn mostly from `keys` (the reader's fields)."""
  leaves = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                     st.floats(allow_nan=False), st.text(max_size=10))
  key = st.one_of(st.sampled_from(list(keys)), st.text(max_size=5))
  return st.recursive(leaves, lambda inner: st.one_of(
      st.lists(inner, max_size=4), st.dictionaries(key, inner, max_size=5)), max_leaves=20)


def jsonl_bytes(keys):
  """JSONL files: lines of JSON values over `keys`, interleaved with raw garbage lines."""
  line = st.one_of(json_values(keys).map(lambda v: json.dumps(v).encode()),
                   st.lists(chunks, max_size=6).map(b"".join),
                   st.just(b"[" * 100_000), st.just(b"1" * 5000))
  return st.lists(line, max_size=8).map(b"\n".join)


def write(path, content: bytes) -> str:
  with open(path, "wb") as f:
    f.write(content)
  return os.fspath(path)


def check_reader(read, path, *names):
  """Runs read(); returns its result, or None when it raised a clear error naming the file.

  `names` are extra strings one of which the error must contain instead of the path
  (e.g. an aligned pair of files names either).
  """
  try:
    result = read()
  except (ValueError, FileNotFoundError) as e:
    message = str(e)
    assert any(os.fspath(n) in message for n in (path,) + names), message
    assert len(message.strip().splitlines()) == 1, message  # one line, not a dump
    return None
  records, log = result
  assert isinstance(log, SkipLog)
  assert log.kept == len(records), (log.kept, len(records))
  return result
