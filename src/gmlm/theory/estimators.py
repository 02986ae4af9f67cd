"""Pseudolikelihood estimators on exponential families, computed exactly by enumeration.

A model is an exponential family p_theta(x) ∝ exp(T(x).theta + b(x)) over Omega^N. A masking
scheme is a set of masks K with probabilities p_K(K | x) (constant in x for weighted /
k-pseudolikelihood, Definitions 1-2; depending on x for adaptive masking, Definition 7). The loss
of one example (x, K) is

    -log p_theta(x_K | x_-K, K),  p_theta(x_K | x_-K, K) ∝ p_theta(x) p_K(K | x) on x's block,

and the population (or empirical) loss is its mean under x ~ p_data, K ~ p_K(. | x). MLE is the
scheme with the single mask [N]. All moments below are reductions over the blocks of each mask
(see :mod:`gmlm.theory.space`), so the cost is O(#masks * S * d) plus O(#blocks * d^2) per mask.

Two per-example gradients are distinguished, because they have different covariances:
- per (x, K) pair (one random mask per example): its covariance equals the Hessian at the truth
  (Lemma 2), so the asymptotic covariance of that estimator is Gamma = H^-1;
- mask-averaged (every mask applied to every example): its covariance is smaller (law of total
  variance), giving Gamma_avg = H^-1 Cov_avg H^-1 <= H^-1.
:func:`fit_samples` offers both (`masks_per_sample="one"` or `"all"`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gmlm.errors import GmlmError
from gmlm.theory.distributions import empirical, ising_features
from gmlm.theory.space import StateSpace, block_log_softmax, check_mask

MAX_MASKS = 200_000


@dataclass(frozen=True, eq=False)
class ExponentialFamily:
    """p_theta(x) ∝ exp(features(x).theta + base(x)) over all states of `space`."""

    space: StateSpace
    features: np.ndarray  # (S, d)
    base: np.ndarray | None = None  # (S,) base log-measure, default 0

    @classmethod
    def ising(cls, n_vars: int) -> ExponentialFamily:
        """Fully parametrised Ising model: theta = (h_i, J_ij for i<j), see IsingModel.theta."""
        space = StateSpace(n_vars, 2)
        return cls(space, ising_features(space))

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])

    def log_potential(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.dim,):
            raise GmlmError(f"theta must have shape ({self.dim},), got {theta.shape}")
        out = self.features @ theta
        return out if self.base is None else out + self.base

    def log_probs(self, theta: np.ndarray) -> np.ndarray:
        lp = self.log_potential(theta)
        top = lp.max()
        return lp - (top + np.log(np.exp(lp - top).sum()))


@dataclass(frozen=True, eq=False)
class MaskingScheme:
    """Masks K with probabilities p_K(K) (weights shape (M,)) or p_K(K | x) (shape (M, S))."""

    n_vars: int
    masks: tuple[tuple[int, ...], ...]
    weights: np.ndarray
    name: str = "custom"

    @property
    def adaptive(self) -> bool:
        return self.weights.ndim == 2

    def weight(self, i: int) -> np.ndarray:
        """p_K(K_i | x) as a scalar array (fixed masking) or an (S,) vector (adaptive)."""
        return self.weights[i]

    @classmethod
    def k_pl(cls, n_vars: int, k: int) -> MaskingScheme:
        """k-pseudolikelihood: every subset of size k, uniformly (k = N is the MLE)."""
        if not isinstance(k, (int, np.integer)) or not 1 <= k <= n_vars:
            raise GmlmError(f"k must be an integer in 1..N = 1..{n_vars}, got {k!r}")
        count = math.comb(n_vars, k)
        if count > MAX_MASKS:
            raise GmlmError(f"C({n_vars}, {k}) = {count:,} masks exceeds the limit {MAX_MASKS:,}")
        masks = tuple(itertools.combinations(range(n_vars), k))
        return cls(n_vars, masks, np.full(len(masks), 1.0 / len(masks)), name=f"{k}-PL")

    @classmethod
    def mle(cls, n_vars: int) -> MaskingScheme:
        return cls(n_vars, (tuple(range(n_vars)),), np.ones(1), name="MLE")

    @classmethod
    def weighted(
        cls,
        n_vars: int,
        masks: Sequence[Sequence[int]],
        weights: Sequence[float] | np.ndarray,
        name: str = "weighted",
    ) -> MaskingScheme:
        """Fixed masking distribution p_K (Definition 1); weights must sum to 1."""
        checked = tuple(check_mask(n_vars, m) for m in masks)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(checked),):
            raise GmlmError(f"need one weight per mask: {len(checked)} masks, weights {w.shape}")
        if np.any(w < 0) or not np.isclose(w.sum(), 1.0, atol=1e-9):
            raise GmlmError(f"mask weights must be non-negative and sum to 1 (sum {w.sum():.6g})")
        return cls(n_vars, checked, w, name=name)

    @classmethod
    def adaptive_masks(
        cls,
        space: StateSpace,
        masks: Sequence[Sequence[int]],
        weights: np.ndarray,
        name: str = "adaptive",
    ) -> MaskingScheme:
        """Adaptive masking (Definition 7): weights[i, x] = p_K(K_i | x), summing to 1 over i."""
        checked = tuple(check_mask(space.n_vars, m) for m in masks)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(checked), space.size):
            raise GmlmError(
                f"adaptive weights need shape (masks, states) = "
                f"({len(checked)}, {space.size}), got {w.shape}"
            )
        if np.any(w < 0) or not np.allclose(w.sum(axis=0), 1.0, atol=1e-9):
            raise GmlmError("adaptive mask probabilities must be >= 0 and sum to 1 for every x")
        return cls(space.n_vars, checked, w, name=name)


@dataclass(frozen=True)
class PLStatistics:
    """Loss, gradient and Hessian of a PL loss under p_data, and per-example gradient covariances.

    cov_pair / cov_avg are None unless requested (see module docstring for the difference).
    """

    loss: float
    grad: np.ndarray  # (d,)
    hessian: np.ndarray  # (d, d)
    cov_pair: np.ndarray | None = None
    cov_avg: np.ndarray | None = None


def pl_statistics(
    family: ExponentialFamily,
    theta: np.ndarray,
    scheme: MaskingScheme,
    data_probs: np.ndarray,
    with_covariance: bool = False,
    pair_weights: np.ndarray | None = None,
) -> PLStatistics:
    """Exact PL loss, gradient, Hessian (and covariances) at `theta` under `data_probs` (S,).

    By default example (x, K) has weight p_data(x) p_K(K | x). `pair_weights` (M, S) replaces
    those weights, e.g. by the empirical law of (sample, mask) pairs when every sample carries
    one random mask; `data_probs` must then be its marginal over x.
    """
    space = family.space
    if scheme.n_vars != space.n_vars:
        raise GmlmError(f"masking scheme is for N={scheme.n_vars}, model has N={space.n_vars}")
    data_probs = np.asarray(data_probs, dtype=np.float64)
    if data_probs.shape != (space.size,):
        raise GmlmError(f"data distribution needs {space.size} entries, got {data_probs.shape}")
    if pair_weights is not None and with_covariance:
        raise GmlmError("covariances are defined for population weights, not pair_weights")
    log_pot = family.log_potential(theta)
    T = family.features
    d = family.dim
    loss = 0.0
    mu_weighted = np.zeros(d)  # sum over masks and blocks of A_b mu_b
    c_total = np.zeros(space.size)  # coefficients of T^T diag(c) T in the Hessian
    second = np.zeros((d, d))  # sum_b A_b mu_b mu_b^T
    cross = np.zeros((d, d))  # sum_b (sum_{x in b} a(x) T(x)) mu_b^T
    mu_avg = np.zeros((space.size, d)) if with_covariance else None
    for i, mask in enumerate(scheme.masks):
        w = scheme.weight(i)
        a = data_probs * w if pair_weights is None else pair_weights[i]  # weight of (x, K)
        if not np.any(a > 0):
            continue
        with np.errstate(divide="ignore"):
            log_q = log_pot + np.log(w) if scheme.adaptive else log_pot
        cond_log = block_log_softmax(space.to_blocks(log_q, mask))  # (B, b)
        cond = np.exp(cond_log)
        a_blocks = space.to_blocks(a, mask)  # (B, b)
        t_blocks = space.to_blocks(T, mask)  # (B, b, d)
        mu = np.einsum("nb,nbd->nd", cond, t_blocks)  # (B, d) conditional means E[T | x_-K, K]
        a_sum = a_blocks.sum(axis=1)  # (B,)
        with np.errstate(invalid="ignore"):
            loss -= float(np.sum(np.where(a_blocks > 0, a_blocks * cond_log, 0.0)))
        mu_weighted += a_sum @ mu
        c_total += space.from_blocks(cond * a_sum[:, None], mask)
        second += (mu * a_sum[:, None]).T @ mu
        if with_covariance:
            assert mu_avg is not None
            cross += np.einsum("nb,nbd->nd", a_blocks, t_blocks).T @ mu
            mu_full = space.from_blocks(np.broadcast_to(mu[:, None, :], t_blocks.shape), mask)
            mu_avg += (w[:, None] if scheme.adaptive else w) * mu_full
    t_mean = data_probs @ T  # sum over (x, K) of a T: the pair weights sum to data_probs
    grad = mu_weighted - t_mean
    hessian = (T * c_total[:, None]).T @ T - second
    cov_pair = cov_avg = None
    if with_covariance:
        assert mu_avg is not None
        outer = (T * data_probs[:, None]).T @ T
        cov_pair = outer - cross - cross.T + second - np.outer(grad, grad)
        g_avg = T - mu_avg  # (S, d) mask-averaged score of each x
        mean = data_probs @ g_avg
        cov_avg = (g_avg * data_probs[:, None]).T @ g_avg - np.outer(mean, mean)
        cov_pair, cov_avg = _sym(cov_pair), _sym(cov_avg)
    return PLStatistics(loss, grad, _sym(hessian), cov_pair, cov_avg)


def _sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + a.T)


def fisher_information(family: ExponentialFamily, theta: np.ndarray) -> np.ndarray:
    """I(theta) = Cov_{p_theta}(T): the MLE's Hessian at the truth."""
    probs = np.exp(family.log_probs(theta))
    mean = probs @ family.features
    centred = family.features - mean
    return _sym((centred * probs[:, None]).T @ centred)


@dataclass(frozen=True)
class FitResult:
    theta: np.ndarray
    loss: float
    grad_norm: float  # max-abs gradient at the returned theta
    iterations: int
    converged: bool


def fit(
    family: ExponentialFamily,
    scheme: MaskingScheme,
    data_probs: np.ndarray,
    theta0: np.ndarray | None = None,
    tol: float = 1e-9,
    max_iter: int = 100,
    pair_weights: np.ndarray | None = None,
    step_tol: float = 1e-6,
) -> FitResult:
    """Minimise the (convex) PL loss under `data_probs` by damped Newton with Armijo backtracking.

    Converged means max |gradient| <= tol and max |Newton step| <= step_tol. When the data put
    no mass on a direction (e.g. a variable that never varies in a small sample) no finite
    minimiser exists; Newton then diverges and the result says converged=False.
    """
    theta = np.zeros(family.dim) if theta0 is None else np.asarray(theta0, dtype=np.float64)

    def stats_at(t: np.ndarray) -> PLStatistics:
        return pl_statistics(family, t, scheme, data_probs, pair_weights=pair_weights)

    stats = stats_at(theta)
    for it in range(max_iter):
        gnorm = float(np.max(np.abs(stats.grad)))
        try:
            step = np.linalg.solve(stats.hessian, stats.grad)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(stats.hessian, stats.grad, rcond=None)[0]
        # Both the gradient and the Newton step must be small: on data with no finite minimiser
        # the gradient vanishes exponentially while the Newton step stays of order one.
        if gnorm <= tol and float(np.max(np.abs(step))) <= step_tol:
            return FitResult(theta, stats.loss, gnorm, it, True)
        slope = float(stats.grad @ step)
        if not np.isfinite(slope) or slope <= 0:
            step, slope = stats.grad, float(stats.grad @ stats.grad)
        # Near the minimum the decrease Armijo asks for falls below the rounding of the loss,
        # whose change is then noise; there a step that does not raise the loss beyond
        # rounding is taken when it shrinks the gradient (Newton's own convergence).
        noise = 64 * np.finfo(np.float64).eps * max(1.0, abs(stats.loss))
        t = 1.0
        while t > 1e-12:
            cand = theta - t * step
            new = stats_at(cand)
            if np.isfinite(new.loss) and (
                new.loss <= stats.loss - 1e-4 * t * slope
                or (new.loss <= stats.loss + noise and np.max(np.abs(new.grad)) < gnorm)
            ):
                break
            t *= 0.5
        else:
            return FitResult(theta, stats.loss, gnorm, it, False)
        theta, stats = cand, new
    return FitResult(theta, stats.loss, float(np.max(np.abs(stats.grad))), max_iter, False)


def fit_samples(
    family: ExponentialFamily,
    scheme: MaskingScheme,
    samples: np.ndarray,
    masks_per_sample: str = "all",
    rng: np.random.Generator | None = None,
    tol: float = 1e-9,
    max_iter: int = 100,
) -> FitResult:
    """Fit to i.i.d. samples (state indices or (n, N) digit rows).

    masks_per_sample="all": every mask, weighted by p_K, is applied to every sample (the loss of
    Definition 1 with the mask expectation taken exactly); asymptotic covariance Gamma_avg.
    masks_per_sample="one": each sample carries one mask drawn from p_K(. | x) with `rng`, the
    sampling under which Lemma 2 holds; asymptotic covariance Gamma = H^-1.
    Grouping equal (sample, mask) pairs makes the loss a weighted sum over states, so the cost
    does not grow with the number of samples.
    """
    space = family.space
    probs = empirical(space, samples)
    if masks_per_sample == "all":
        return fit(family, scheme, probs, tol=tol, max_iter=max_iter)
    if masks_per_sample != "one":
        raise GmlmError(f"masks_per_sample must be 'all' or 'one', got {masks_per_sample!r}")
    if rng is None:
        raise GmlmError("masks_per_sample='one' needs a random generator (rng) to draw the masks")
    idx = np.asarray(samples)
    idx = space.index(idx) if idx.ndim == 2 else idx
    weights = (
        scheme.weights[:, idx].T
        if scheme.adaptive
        else np.broadcast_to(scheme.weights, (idx.size, len(scheme.masks)))
    )
    cdf = np.cumsum(weights, axis=1)
    which = np.minimum(
        (cdf < rng.random((idx.size, 1)) * cdf[:, -1:]).sum(axis=1), cdf.shape[1] - 1
    )
    pairs = np.zeros((len(scheme.masks), space.size))
    np.add.at(pairs, (which, idx), 1.0 / idx.size)
    return fit(family, scheme, probs, tol=tol, max_iter=max_iter, pair_weights=pairs)
