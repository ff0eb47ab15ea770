"""Losses against their published formulas, in numpy."""
import jax.numpy as jnp
import numpy as np

from bert_jax.train import losses


def _reference(logits, labels, weights, class_weights=None, gamma=0.0):
  z = logits - logits.max(-1, keepdims=True)
  logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
  lp = np.take_along_axis(logp, labels[:, None], -1)[:, 0]
  loss = -lp * (1 - np.exp(lp)) ** gamma                   # focal: (1 - p_t)^γ · CE
  if class_weights is not None:
    loss = loss * class_weights[labels]
  return float(np.sum(loss * weights))


def test_cross_entropy_focal_and_class_weights_match_the_formulas():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(12, 3)).astype(np.float32) * 3
  labels = rng.integers(0, 3, size=12)
  weights = (rng.random(12) < 0.8).astype(np.float32)
  cw = np.array([0.5, 1.0, 4.0], np.float32)
  for gamma in (0.0, 2.0):
    for class_weights in (None, cw):
      got = losses.softmax_cross_entropy(jnp.asarray(logits), jnp.asarray(labels),
                                         jnp.asarray(weights), class_weights=class_weights,
                                         focal_gamma=gamma)
      np.testing.assert_allclose(got, _reference(logits, labels, weights, class_weights, gamma),
                                 rtol=1e-5)
  # Focal loss down-weights confident, correct examples the most.
  easy = jnp.asarray([[6.0, 0.0]])
  ce = losses.softmax_cross_entropy(easy, jnp.asarray([0]))
  focal = losses.softmax_cross_entropy(easy, jnp.asarray([0]), focal_gamma=2.0)
  assert focal < 1e-4 * ce


def test_correct_count_is_argmax_accuracy_with_its_tie_breaking():
  rng = np.random.default_rng(0)
  # Small integer logits: many ties, which argmax breaks to the lowest index.
  logits = jnp.asarray(rng.integers(0, 4, size=(64, 7, 11)), jnp.float32)
  labels = jnp.asarray(rng.integers(-1, 12, size=(64, 7)))  # -1 and 11: out of range
  weights = jnp.asarray(rng.random((64, 7)), jnp.float32)
  want = np.sum((np.argmax(np.asarray(logits), -1) == np.asarray(labels)) * np.asarray(weights))
  got = losses.correct_count(logits, labels, weights)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert 0 < float(got) < float(weights.sum())
  # Unweighted, on random logits.
  logits = jnp.asarray(rng.normal(size=(50, 30)), jnp.float32)
  labels = jnp.asarray(rng.integers(0, 30, size=(50,)))
  assert float(losses.correct_count(logits, labels)) == float(
      np.sum(np.argmax(np.asarray(logits), -1) == np.asarray(labels)))


def test_cross_entropy_gradient_is_softmax_minus_one_hot_and_skips_out_of_range_labels():
  """The label's logit is gathered, not taken through a one-hot product: the gradient must
  still be the published (softmax - one_hot(label)) · w, and a label outside [0, classes)
  (an ignore index) still contributes logsumexp alone, as the one-hot form did."""
  import jax
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(6, 5, 9)).astype(np.float32) * 2
  labels = rng.integers(0, 9, size=(6, 5))
  labels[0, :2] = -100
  labels[1, 0] = 9
  weights = rng.random((6, 5)).astype(np.float32)
  grad = jax.grad(losses.softmax_cross_entropy)(jnp.asarray(logits), jnp.asarray(labels),
                                                 jnp.asarray(weights))
  p = np.exp(logits - logits.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  onehot = (np.arange(9) == labels[..., None]).astype(np.float32)  # zero rows out of range
  np.testing.assert_allclose(grad, (p - onehot) * weights[..., None], rtol=1e-5, atol=1e-7)
  lse = np.log(np.exp(logits).sum(-1))
  want = np.sum((lse - np.sum(onehot * logits, -1)) * weights)
  np.testing.assert_allclose(losses.softmax_cross_entropy(
      jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(weights)), want, rtol=1e-5)
  # Label smoothing ε: targets (1 - ε)·one_hot + ε/classes, the loss -Σ targets·log p
  # (on the rows with a label: the formula's targets sum to 1 only there).
  eps, kept = 0.2, weights * (onehot.sum(-1) > 0)
  targets = (1 - eps) * onehot + eps / 9
  np.testing.assert_allclose(losses.softmax_cross_entropy(
      jnp.asarray(logits), jnp.asarray(labels), jnp.asarray(kept), label_smoothing=eps),
      np.sum(-np.sum(targets * (logits - lse[..., None]), -1) * kept), rtol=1e-5)
