"""Label-smoothed cross-entropy against a hand computation (Szegedy et al. 2016, Sec. 7:
q'(k) = (1 - ε) δ_{k,y} + ε / K, loss = -Σ_k q'(k) log p(k))."""
import math

import jax.numpy as jnp
import pytest

from bert_jax.train import losses


def test_label_smoothed_cross_entropy_by_hand():
  # Row 0: logits (2, 1, 0), label 0, ε = 0.3, K = 3 -> q' = (0.8, 0.1, 0.1).
  # log Z = log(e^2 + e + 1) = 2.4076059644; loss = log Z - (0.8·2 + 0.1·1 + 0.1·0).
  lse = math.log(math.exp(2) + math.exp(1) + 1)
  assert lse == pytest.approx(2.4076059644)
  row0 = lse - 1.7                                     # 0.7076059644
  # Row 1: logits (0, 0, 3), label 1, weight 2 -> q' = (0.1, 0.8, 0.1).
  lse1 = math.log(2 + math.exp(3))                     # 3.0949229815
  row1 = lse1 - 0.1 * 3                                # 2.7949229815
  # Row 2: a padding token (weight 0) adds nothing whatever its logits.
  logits = jnp.array([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0], [50.0, -50.0, 0.0]])
  labels = jnp.array([0, 1, 2])
  weights = jnp.array([1.0, 2.0, 0.0])
  got = losses.softmax_cross_entropy(logits, labels, weights, label_smoothing=0.3)
  assert float(got) == pytest.approx(row0 + 2 * row1, rel=1e-6)
  assert float(got) == pytest.approx(0.7076059644 + 2 * 2.7949229815, rel=1e-6)
  # ε = 0 is the plain negative log-likelihood.
  plain = losses.softmax_cross_entropy(logits[:1], labels[:1], label_smoothing=0.0)
  assert float(plain) == pytest.approx(lse - 2.0, rel=1e-6)
