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
import scipy.linalg
import scipy.optimize

from gmlm.errors import GmlmError
from gmlm.theory.distributions import empirical, ising_features
from gmlm.theory.space import StateSpace, block_log_softmax, check_mask

MAX_MASKS = 200_000
EPS = float(np.finfo(np.float64).eps)


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

    cov_pair / cov_avg are None unless requested (see module docstring for the difference). The
    roots are None unless requested: upper-triangular (d, d) R with R^T R equal to the matrix,
    obtained by QR of the weighted, block-centred per-example rows that the matrix is the Gram
    matrix of. A root carries the matrix to relative accuracy ~eps * sqrt(cond) where the matrix
    itself (a sum of squares formed in float64) is only good to ~eps * cond.
    """

    loss: float
    grad: np.ndarray  # (d,)
    hessian: np.ndarray  # (d, d)
    cov_pair: np.ndarray | None = None
    cov_avg: np.ndarray | None = None
    hessian_root: np.ndarray | None = None  # (d, d)
    cov_pair_root: np.ndarray | None = None  # (d, d)
    cov_avg_root: np.ndarray | None = None  # (d, d)


def pl_statistics(
    family: ExponentialFamily,
    theta: np.ndarray,
    scheme: MaskingScheme,
    data_probs: np.ndarray,
    with_covariance: bool = False,
    pair_weights: np.ndarray | None = None,
    roots: bool = False,
) -> PLStatistics:
    """Exact PL loss, gradient, Hessian (and covariances) at `theta` under `data_probs` (S,).

    By default example (x, K) has weight p_data(x) p_K(K | x). `pair_weights` (M, S) replaces
    those weights, e.g. by the empirical law of (sample, mask) pairs when every sample carries
    one random mask; `data_probs` must then be its marginal over x.

    Every second moment is a sum of block covariances, each formed from features centred inside
    their block (:func:`centred_features`): summing uncentred moments instead (T' diag(c) T -
    sum A mu mu') leaves an absolute error ~eps * ||H|| that swamps the small eigenvalues of
    strongly coupled models. The cost is O(#masks * S * d^2).
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
    d = family.dim
    loss = 0.0
    grad = np.zeros(d)
    hessian = np.zeros((d, d))
    h_root = GramRoot(d) if roots else None
    pair_second = np.zeros((d, d))  # sum over (x, K) of a g g^T, g = T(x) - E[T | block]
    pair_root = GramRoot(d) if roots and with_covariance else None
    g_avg = np.zeros((space.size, d)) if with_covariance else None  # mask-averaged score
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
        centred = centred_features(cond, space.to_blocks(family.features, mask))  # (B, b, d)
        with np.errstate(invalid="ignore"):
            loss -= float(np.sum(np.where(a_blocks > 0, a_blocks * cond_log, 0.0)))
        grad -= np.einsum("nb,nbd->d", a_blocks, centred)  # E[T | block] - T(x), weighted
        # The block covariance weighted by the block's data mass is the Gram matrix of the rows
        # sqrt(A_b c(y)) (T(y) - mu_b), y in the block.
        weight = a_blocks.sum(axis=1, keepdims=True) * cond
        rows = (np.sqrt(weight)[..., None] * centred).reshape(-1, d)
        hessian += rows.T @ rows
        if h_root is not None:
            h_root.add(rows)
        if with_covariance:
            assert g_avg is not None
            rows = (np.sqrt(a_blocks)[..., None] * centred).reshape(-1, d)
            pair_second += rows.T @ rows
            if pair_root is not None:
                pair_root.add(rows)
            g_avg += (w[:, None] if scheme.adaptive else w) * space.from_blocks(centred, mask)
    cov_pair = cov_avg = pair_r = avg_r = None
    if with_covariance:
        assert g_avg is not None
        # the pair weights sum to 1 and their gradients to `grad`: Cov = E g g^T - grad grad^T
        cov_pair = _sym(pair_second - np.outer(grad, grad))
        mean = data_probs @ g_avg
        avg = np.sqrt(data_probs)[:, None] * (g_avg - mean)
        cov_avg = _sym(avg.T @ avg)
        if pair_root is not None:
            pair_r = downdate_root(pair_root.root(), grad)
            avg_root = GramRoot(d)
            avg_root.add(avg)
            avg_r = avg_root.root()
    return PLStatistics(
        loss,
        grad,
        _sym(hessian),
        cov_pair,
        cov_avg,
        None if h_root is None else h_root.root(),
        pair_r,
        avg_r,
    )


def downdate_root(root: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Upper-triangular root of R^T R - g g^T (positive definite) from R: R^T (I - u u^T) R.

    With u = R^-T g, I - u u^T = (I - a u u^T)^2 for a = 1 / (1 + sqrt(1 - u.u)), so the new
    root is the QR re-triangularisation of (I - a u u^T) R. Under realizability g is zero.
    """
    if not np.any(g):
        return root
    u = scipy.linalg.solve_triangular(root, g, trans="T", check_finite=False)
    nu = float(u @ u)
    if not nu < 1.0:
        raise GmlmError(
            "the per-example gradients have a singular covariance (the population gradient "
            "explains all of it): the sandwich covariance is undefined for these data"
        )
    alpha = 1.0 / (1.0 + np.sqrt(1.0 - nu))
    return _triangular_factor(root - alpha * np.outer(u, u @ root))


def centred_features(cond: np.ndarray, features: np.ndarray) -> np.ndarray:
    """(B, b), (B, b, d) -> (B, b, d): T(y) - E[T | block] for every state y of every block.

    The mean is taken of differences to the block's most likely state m: T(y) - E T =
    (T(y) - T(m)) - sum_z c(z) (T(z) - T(m)). The differences are exact for integer-valued
    features, and the correction is small exactly when the block is concentrated on m, which is
    when a plain T(y) - sum_z c(z) T(z) would cancel to rounding noise.
    """
    mode = np.argmax(cond, axis=1)
    delta = features - np.take_along_axis(features, mode[:, None, None], axis=1)
    shift = np.einsum("nb,nbd->nd", cond, delta)
    return delta - shift[:, None, :]


class GramRoot:
    """Upper-triangular R with R^T R = sum of rows^T rows over every block of rows added.

    Householder QR of the stacked rows, folded every ~2^21 entries so memory stays bounded.
    """

    FOLD_ENTRIES = 1 << 21

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._parts: list[np.ndarray] = []
        self._entries = 0

    def add(self, rows: np.ndarray) -> None:
        """rows: (n, d)."""
        self._parts.append(np.asarray(rows, dtype=np.float64).reshape(-1, self.dim))
        self._entries += self._parts[-1].size
        if self._entries > self.FOLD_ENTRIES:
            self._fold()

    def _fold(self) -> None:
        stacked = np.vstack(self._parts) if self._parts else np.zeros((0, self.dim))
        r = _triangular_factor(stacked)
        self._parts = [r]
        self._entries = r.size

    def root(self) -> np.ndarray:
        """(d, d) upper-triangular root (rows of zeros where fewer than d rows were added)."""
        self._fold()
        r = self._parts[0]
        out = np.zeros((self.dim, self.dim))
        out[: r.shape[0]] = r
        return out


def _triangular_factor(a: np.ndarray) -> np.ndarray:
    """(min(n, d), d) R of the Householder QR of an (n, d) matrix (numpy types it loosely)."""
    return np.asarray(np.linalg.qr(a, mode="r"))


def _sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + a.T)


def fisher_information(family: ExponentialFamily, theta: np.ndarray) -> np.ndarray:
    """I(theta) = Cov_{p_theta}(T): the MLE's Hessian at the truth."""
    return fisher_statistics(family, theta).hessian


def fisher_root(family: ExponentialFamily, theta: np.ndarray) -> np.ndarray:
    """(d, d) upper-triangular F with F^T F = I(theta), see :class:`PLStatistics`."""
    root = fisher_statistics(family, theta, roots=True).hessian_root
    assert root is not None
    return root


def fisher_statistics(
    family: ExponentialFamily, theta: np.ndarray, roots: bool = False
) -> PLStatistics:
    """The MLE loss at the truth: its Hessian is I(theta), centred like every PL Hessian."""
    probs = np.exp(family.log_probs(theta))
    return pl_statistics(family, theta, MaskingScheme.mle(family.space.n_vars), probs, roots=roots)


@dataclass(frozen=True)
class FitResult:
    theta: np.ndarray
    loss: float
    grad_norm: float  # max-abs gradient at the returned theta
    iterations: int
    converged: bool
    #: "converged"; "no finite minimiser" (the data leave a direction along which the loss
    #: decreases forever, decided exactly before any iteration); or "not converged"
    status: str = "converged"


def fit(
    family: ExponentialFamily,
    scheme: MaskingScheme,
    data_probs: np.ndarray,
    theta0: np.ndarray | None = None,
    tol: float = 1e-14,
    max_iter: int = 100,
    pair_weights: np.ndarray | None = None,
) -> FitResult:
    """Minimise the (convex) PL loss under `data_probs` by damped Newton with Armijo backtracking.

    First, :func:`finite_minimiser_exists` decides whether there is anything to converge to. If
    there is, Newton stops when half the squared Newton decrement, g^T H^-1 g / 2 (the loss
    decrease a Newton step still promises), is at most tol * (1 + |loss|): relative to the loss,
    so that the test is not set below the loss's own rounding, which an absolute gradient
    tolerance can be (the line search then fails on fits that have converged). For the same
    reason the line search tolerates a change of the loss within its rounding.
    """
    theta = np.zeros(family.dim) if theta0 is None else np.asarray(theta0, dtype=np.float64)

    def stats_at(t: np.ndarray) -> PLStatistics:
        return pl_statistics(family, t, scheme, data_probs, pair_weights=pair_weights)

    stats = stats_at(theta)
    if not finite_minimiser_exists(family, scheme, data_probs, pair_weights):
        gnorm = float(np.max(np.abs(stats.grad)))
        return FitResult(theta, stats.loss, gnorm, 0, False, "no finite minimiser")
    for it in range(max_iter):
        gnorm = float(np.max(np.abs(stats.grad)))
        try:
            step = np.linalg.solve(stats.hessian, stats.grad)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(stats.hessian, stats.grad, rcond=None)[0]
        decrement = float(stats.grad @ step)  # lambda^2
        if np.isfinite(decrement) and 0.5 * decrement <= tol * (1.0 + abs(stats.loss)):
            return FitResult(theta, stats.loss, gnorm, it, True)
        if not np.isfinite(decrement) or decrement <= 0:
            step, decrement = stats.grad, float(stats.grad @ stats.grad)
        # Armijo, less the loss's rounding: near the optimum the promised decrease is below it
        slack = 16.0 * EPS * (1.0 + abs(stats.loss))
        t = 1.0
        while t > 1e-12:
            cand = theta - t * step
            new = stats_at(cand)
            if np.isfinite(new.loss) and new.loss <= stats.loss - 1e-4 * t * decrement + slack:
                break
            t *= 0.5
        else:
            return FitResult(theta, stats.loss, gnorm, it, False, "not converged")
        theta, stats = cand, new
    gnorm = float(np.max(np.abs(stats.grad)))
    return FitResult(theta, stats.loss, gnorm, max_iter, False, "not converged")


def finite_minimiser_exists(
    family: ExponentialFamily,
    scheme: MaskingScheme,
    data_probs: np.ndarray,
    pair_weights: np.ndarray | None = None,
) -> bool:
    """Whether the PL loss under these weights attains its infimum (see recession_direction)."""
    return recession_direction(family, scheme, data_probs, pair_weights) is None


def recession_direction(
    family: ExponentialFamily,
    scheme: MaskingScheme,
    data_probs: np.ndarray,
    pair_weights: np.ndarray | None = None,
) -> np.ndarray | None:
    """(d,) a direction along which the PL loss decreases forever, or None if it has a minimiser.

    The loss of (x, K) is log sum_{y in x's block} exp(theta.(T(y) - T(x))). It has no finite
    minimiser iff some direction v has v.(T(y) - T(x)) <= 0 for every such (x, K, y) of positive
    weight and < 0 for one (the pseudolikelihood analogue of separation in logistic regression):
    along v every term is non-increasing and one decreases strictly, from any theta. Directions
    with v.(T(y) - T(x)) = 0 throughout leave the loss constant: a minimiser still exists,
    unique up to them. A linear program (max of -sum v.(T(y) - T(x)) over |v_i| <= 1 under those
    constraints, which is positive iff such a v exists) decides it exactly. Small samples from
    strongly coupled models, which miss whole blocks of states, have such directions.
    """
    space = family.space
    rows = []
    for i, mask in enumerate(scheme.masks):
        a = data_probs * scheme.weight(i) if pair_weights is None else pair_weights[i]
        if not np.any(a > 0):
            continue
        t_blocks = space.to_blocks(family.features, mask)  # (B, b, d)
        block, member = np.nonzero(space.to_blocks(a, mask) > 0)
        rows.append((t_blocks[block] - t_blocks[block, member][:, None, :]).reshape(-1, family.dim))
    diffs = np.unique(np.concatenate(rows), axis=0) if rows else np.zeros((0, family.dim))
    diffs = diffs[np.any(diffs != 0, axis=1)]
    if diffs.size == 0:
        return None
    res = scipy.optimize.linprog(
        diffs.sum(axis=0),
        A_ub=diffs,
        b_ub=np.zeros(len(diffs)),
        bounds=(-1.0, 1.0),
        method="highs",
    )
    if res.status != 0:
        raise GmlmError(f"the existence check of the fit failed: {res.message}")
    if res.fun >= -1e-9 * float(np.abs(diffs).sum()):
        return None
    return np.asarray(res.x)


def fit_samples(
    family: ExponentialFamily,
    scheme: MaskingScheme,
    samples: np.ndarray,
    masks_per_sample: str = "all",
    rng: np.random.Generator | None = None,
    tol: float = 1e-14,
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
