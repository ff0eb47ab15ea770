"""NSP instances and packed rows, checked by their statistics."""
import numpy as np
import pytest

from bert_jax.data import instances as inst

CLS, SEP, PAD, MASK, UNK = 2, 3, 0, 4, 1
SPECIAL = [PAD, UNK, CLS, SEP, MASK]
FIRST = 1000  # synthetic token ids start here: id - FIRST is the corpus position


def synthetic_corpus(num_docs, seed=0, sentences=(1, 30), lengths=(3, 40)):
  """Documents whose token ids are their global positions (+FIRST): each id is unique."""
  rng = np.random.default_rng(seed)
  docs, doc_of, pos = [], [], FIRST
  for d in range(num_docs):
    doc = []
    for _ in range(rng.integers(*sentences)):
      n = int(rng.integers(*lengths))
      doc.append(np.arange(pos, pos + n, dtype=np.int32))
      pos += n
    docs.append(doc)
    doc_of += [d] * sum(len(s) for s in doc)
  return docs, np.array(doc_of)


@pytest.fixture(scope="module")
def nsp():
  docs, doc_of = synthetic_corpus(600)
  rng = np.random.default_rng(1)
  sampler = inst.CumulativeSampler(np.ones(len(docs)))
  instances = []
  for dupe in range(2):
    for i in range(len(docs)):
      instances += inst.create_nsp_instances(docs, i, 128, 0.1, CLS, SEP, rng, sampler)
  return docs, doc_of, instances


def split_ab(instance):
  ids = instance.input_ids
  first_sep = int(np.flatnonzero(ids == SEP)[0])
  return ids[1:first_sep], ids[first_sep + 1:-1], first_sep


def test_nsp_layout(nsp):
  _, _, instances = nsp
  for x in instances:
    a, b, first_sep = split_ab(x)
    assert x.input_ids[0] == CLS and x.input_ids[-1] == SEP
    assert len(x.input_ids) <= 128 and len(a) >= 1 and len(b) >= 1
    np.testing.assert_array_equal(x.segment_ids, np.arange(len(x.input_ids)) > first_sep)
  lengths = np.array([len(x.input_ids) for x in instances])
  assert (lengths == 128).mean() > 0.5  # most fill the sequence
  assert (lengths < 40).mean() > 0.02  # short_seq_prob makes some short


def test_nsp_label_balance_and_real_continuations(nsp):
  docs, doc_of, instances = nsp
  assert sum(len(s) for d in docs for s in d) >= 100_000
  labels = np.array([x.is_random_next for x in instances])
  assert len(labels) > 5000
  assert abs(labels.mean() - 0.5) < 0.02
  for x in instances:
    a, b, _ = split_ab(x)
    # Ids are corpus positions: A and B are contiguous runs of the source.
    assert (np.diff(a) == 1).all() and (np.diff(b) == 1).all()
    a_doc, b_doc = doc_of[a[0] - FIRST], doc_of[b[0] - FIRST]
    assert doc_of[a[-1] - FIRST] == a_doc and doc_of[b[-1] - FIRST] == b_doc
    if x.is_random_next:
      assert b_doc != a_doc
    else:  # B continues A in the same document; only truncated tokens lie between.
      assert b_doc == a_doc
      assert 0 <= b[0] - a[-1] - 1 <= 128


def test_nsp_single_documents_and_determinism():
  docs, _ = synthetic_corpus(1, sentences=(3, 4))
  out = inst.create_nsp_instances(docs, 0, 32, 0.0, CLS, SEP, np.random.default_rng(0))
  assert out  # a pool of one draws the random B from itself, never crashes
  docs, _ = synthetic_corpus(50)
  run = lambda: [x.input_ids.tolist() for x in inst.create_nsp_instances(
      docs, 3, 64, 0.1, CLS, SEP, np.random.default_rng(5))]
  assert run() == run()


@pytest.mark.parametrize("across", [True, False])
def test_packed_rows_keep_every_token_in_order(across):
  docs, doc_of = synthetic_corpus(200, lengths=(3, 200))  # some sentences overflow a row
  rows = inst.create_packed_rows(docs, 128, CLS, SEP, across_documents=across)
  tokens = []
  for row in rows:
    ids, seg = row.input_ids, row.segment_ids
    assert len(ids) <= 128 and ids[0] == CLS and ids[-1] == SEP and seg[0] == 1
    # Segments number the row's document fragments 1, 2, ...; each ends with [SEP].
    sep_at = np.flatnonzero(ids == SEP)
    np.testing.assert_array_equal(seg[sep_at], np.arange(1, len(sep_at) + 1))
    expected = np.concatenate([[1], 1 + np.cumsum(ids[:-1] == SEP)])
    np.testing.assert_array_equal(seg, expected)
    body = ids[(ids != CLS) & (ids != SEP)]
    # A fragment holds one document only.
    for s in range(1, seg.max() + 1):
      frag = ids[(seg == s) & (ids >= FIRST)]
      assert len(set(doc_of[frag - FIRST])) == 1
    if not across:
      assert seg.max() == 1
    tokens.append(body)
  np.testing.assert_array_equal(np.concatenate(tokens), np.arange(FIRST, FIRST + len(doc_of)))
  docs, _ = synthetic_corpus(100, lengths=(3, 40))
  rows = inst.create_packed_rows(docs, 128, CLS, SEP, across_documents=across)
  fill = np.mean([len(r.input_ids) for r in rows]) / 128
  assert fill > (0.85 if across else 0.6)  # FULL-SENTENCES wastes only row ends
