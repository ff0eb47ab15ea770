"""Tolerances for two computations of one quantity, derived from the arithmetic.

Two computations that are equal in exact arithmetic (one batch against k accumulated
microbatches, one device against a sharded mesh, one process against several) differ by
rounding only: XLA adds the same terms in another order or grouping. For a sum of n
terms evaluated in any order and grouping,
    |fl(s) - s| <= gamma_{n-1} * sum|t_i|,   gamma_k = k*u / (1 - k*u)
(Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 2002, eq. (4.4)), with
u the unit roundoff (2^-24 for float32, 2^-53 for float64). Two evaluations differ by at
most twice that. A value a network computes is a sum of terms that are themselves
computed; to first order in u their relative errors add along the dependency chain, so
the same form holds with n the number of additions on the longest chain (`chain`: the
lengths of the reductions a value passes through, e.g. `bert_step_chain`).

What the tests must supply is sum|t_i|:
- A sum of non-negative terms (a cross-entropy loss, a count) has sum|t_i| = |s|: the
  bound is relative, `sum_rtol(n)`, and needs nothing else.
- A gradient entry sums terms of both signs: sum|t_i| = kappa |g| with kappa its
  cancellation ratio, which nothing cheap measures (it needs every token's contribution).
  `GRAD_CANCELLATION` = 10 is the stated assumption; the worst-case gamma_n (n u, where
  random rounding grows like sqrt(n) u: ~50x less at n ~ 2400) leaves the bound room for
  entries cancelling far more in practice. For BERT's golden step that is a relative
  gradient bound of 2.8e-3.
- Adam turns a gradient error into a parameter error; `adam_param_atol` propagates it
  (first order) through the bias-corrected moments, `adam_moment_atol` bounds mu and nu.
  The parameter bound comes to ~2% of what the steps moved a parameter: rounding (~1e-6
  of it, measured) passes on any machine, and a wrong normalization still fails on the
  loss (relative bound 2e-5) and the gradient norm.

Entries whose exact value is 0 (BERT's key bias: a shift of every score of a query
cancels in the softmax) have kappa = infinity and are held to their own rule by the test.
Tests that use this: tests/train/test_golden.py (gradient accumulation),
tests/train/test_sharded_steps.py (meshes, accumulation).
"""
from __future__ import annotations

import math

import numpy as np

U32 = 2.0 ** -24   # float32 unit roundoff (eps / 2)
U64 = 2.0 ** -53   # float64
# Assumed bound on sum|terms| / |sum| of a gradient entry (see the module docstring).
GRAD_CANCELLATION = 10.0


def gamma(n: int, u: float) -> float:
  """Higham's gamma_n = n u / (1 - n u): the relative error bound of n roundings."""
  assert n * u < 1, (n, u)
  return n * u / (1 - n * u)


def sum_atol(abs_sum, n: int, u: float = U32):
  """Two evaluations of one n-term sum (any order) differ by at most this."""
  return 2 * gamma(max(n - 1, 0), u) * abs_sum


def sum_rtol(n: int, u: float = U32) -> float:
  """The same, relative, for a sum of non-negative terms (sum|t_i| = the sum)."""
  return 2 * gamma(max(n - 1, 0), u)


def bert_step_chain(*, hidden: int, mlp: int, heads: int, layers: int, seq: int, vocab: int,
                    batch: int, preds: int) -> int:
  """Additions on the longest dependency chain of one BERT pretraining step's gradient.

  Forward, per value: the embedding sum (3) and its layer norm (mean and variance, 2H);
  per layer the Q/K/V projection (H), the scores (head_dim), the softmax normalizer and
  the attention-weighted sum (seq each), the output projection (H), the residual add and
  layer norm (1 + 2H), the FFN's two matmuls (H, mlp) and its residual and layer norm
  (1 + 2H); the MLM head's transform, layer norm, vocabulary logits and log-sum-exp
  (H + 2H + H + vocab); the loss sums over the batch's predictions and rows. The backward
  pass runs the same reductions transposed (x2), and a parameter's gradient adds one term
  per token of the batch (batch * seq).
  """
  per_layer = (hidden + hidden // heads + 2 * seq + hidden + 1 + 2 * hidden
               + hidden + mlp + 1 + 2 * hidden)
  forward = 3 + 2 * hidden + layers * per_layer + hidden + 2 * hidden + hidden + vocab
  return 2 * forward + batch * preds + batch + batch * seq


def grad_rtol(chain: int, u: float = U32, kappa: float = GRAD_CANCELLATION) -> float:
  """Relative bound on a gradient entry's rounding difference: 2 gamma_chain * kappa.
  Global-norm clipping scales every entry by 1/||g||, whose relative error is at most the
  largest entry's: the clipped gradient's bound is twice this."""
  return 2 * gamma(chain, u) * kappa


def _adam_b_min(t: int, b2: float) -> float:
  """Smallest weight of one step's g^2 in Adam's bias-corrected second moment at step t:
  (1 - b2) b2^(t-1) / (1 - b2^t) (the oldest step's)."""
  return (1 - b2) * b2 ** (t - 1) / (1 - b2 ** t)


def adam_param_atol(learning_rates, rho: float, b2: float) -> float:
  """Bound on |theta_a - theta_b| after Adam steps whose gradients differ by at most
  rho * |g| per entry (first order in rho; weight decay's term is second order).

  Per step t (1-based, learning rate lr_t): u = m_hat / (sqrt(v_hat) + eps), with m_hat
  and v_hat weighted means (weights a_s, b_s summing to 1) of g_s and g_s^2. Then
  |d m_hat| <= rho max|g_s|, |d sqrt(v_hat)| <= rho sqrt(v_hat) (a weighted 2-norm), so
  |du| <= rho (max|g_s| / sqrt(v_hat) + |u|) <= 2 rho / sqrt(min_s b_s), since
  sqrt(v_hat) >= sqrt(b_s) |g_s| for every s and |u| <= max|g_s| / sqrt(v_hat).
  The parameter moves by the sum of lr_t u_t, so the bound is sum_t lr_t * 2 rho /
  sqrt(b_min(t)). (The difference earlier steps leave in theta changes later gradients by
  a further O(lr rho) relative: second order, left out.)
  """
  return sum(lr * 2 * rho / math.sqrt(_adam_b_min(t, b2))
             for t, lr in enumerate(learning_rates, start=1))


def adam_moment_atol(nu, steps: int, rho: float, b1: float, b2: float):
  """Bounds on |mu_a - mu_b| and |nu_a - nu_b| (optax's raw moments, per entry) after
  `steps` Adam steps whose gradients differ by at most rho * |g|.

  mu = sum_s c_s g_s with c_s = (1 - b1) b1^(t-s), nu = sum_s d_s g_s^2 with
  d_s = (1 - b2) b2^(t-s). |d mu| <= rho sum c_s |g_s| <= rho sqrt(sum c_s^2 / d_s)
  sqrt(nu) (Cauchy-Schwarz); |d nu| <= (2 rho + rho^2) nu.
  """
  c = [(1 - b1) * b1 ** (steps - s) for s in range(1, steps + 1)]
  d = [(1 - b2) * b2 ** (steps - s) for s in range(1, steps + 1)]
  factor = math.sqrt(sum(ci * ci / di for ci, di in zip(c, d)))
  nu = np.asarray(nu, np.float64)
  return rho * factor * np.sqrt(nu), (2 * rho + rho * rho) * nu
