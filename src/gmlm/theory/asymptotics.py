"""Exact asymptotic covariances of pseudolikelihood estimators and the paper's inequalities.

Under realizability (data drawn from p_theta*) and with one random mask per example:
    sqrt(n)(theta_hat - theta*) -> N(0, Gamma),  Gamma = H^-1 Cov(grad l) H^-1 = H^-1 (Lemma 2).
Theorem 1: Gamma^{k+1} <= Gamma^k in the PSD order, Gamma^N = I^-1.
Theorems 2/3: Gamma <= C I^-1 with C the Poincare constant of the matching block dynamics.

Comparisons are scale-free: A >= B is measured by the generalised eigenvalues of the pair, the
eigenvalues of A^-1/2 B A^-1/2, so that a margin of -1e-3 means "B exceeds A by 0.1% in some
direction" whether that direction's variance is 1e-10 or 1e3. (A margin divided by the largest
eigenvalue instead hides any violation along directions 1/cond(A) smaller.) Every matrix compared
is held through triangular roots (see :class:`Sandwich`), which keeps these eigenvalues accurate
to ~eps * sqrt(cond) for the strongly coupled models whose Fisher information has cond ~1e10.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.linalg

from gmlm.errors import GmlmError
from gmlm.theory.estimators import (
    ExponentialFamily,
    MaskingScheme,
    fisher_root,
    pl_statistics,
)

#: A root whose singular values span more than this is treated as singular: cond(H) >= 1e26.
SINGULAR_ROOT = 1e13


@dataclass(frozen=True, eq=False)
class Sandwich:
    """The positive definite A^-1 B A^-1, given by upper-triangular roots A = R^T R, B = L^T L.

    Gamma = H^-1 Cov H^-1 is one (R, L = roots of H and Cov); c I^-1 = I^-1 (c I) I^-1 is another
    (R = F, L = sqrt(c) F with I = F^T F). As X = (L R^-1) R^-T satisfies X^T X = A^-1 B A^-1,
    every comparison reduces to triangular solves between roots, never to the inverse of an
    ill-conditioned matrix.
    """

    outer: np.ndarray  # R, (d, d)
    inner: np.ndarray  # L, (d, d)

    @cached_property
    def ratio(self) -> np.ndarray:
        """(d, d) U = L R^-1 (upper triangular); its singular values squared are eig(A^-1 B)."""
        return _solve(self.outer, self.inner.T, trans="T").T

    @cached_property
    def matrix(self) -> np.ndarray:
        """(d, d) A^-1 B A^-1 = X^T X, X = U R^-T."""
        x = _solve(self.outer, self.ratio.T).T
        return sym(x.T @ x)

    def scaled(self, c: float) -> Sandwich:
        """c A^-1 B A^-1."""
        return Sandwich(self.outer, np.sqrt(c) * self.inner)


def inverse_of(root: np.ndarray) -> Sandwich:
    """A^-1 for A = R^T R, as a sandwich (B = A)."""
    return Sandwich(root, root)


def generalised_eigenvalues(a: Sandwich, b: Sandwich) -> np.ndarray:
    """Ascending eigenvalues of a^-1/2 b a^-1/2 (all 1 iff a = b; all <= 1 iff a >= b).

    They are the squared singular values of X_b X_a^-1 = U_b (R_b^-T R_a^T) U_a^-1.
    """
    middle = _solve(b.outer, a.outer.T, trans="T")  # R_b^-T R_a^T
    product = _solve(a.ratio, (b.ratio @ middle).T, trans="T").T
    return np.sort(np.linalg.svd(product, compute_uv=False) ** 2)


def root_eigenvalues(a_root: np.ndarray, b_root: np.ndarray) -> np.ndarray:
    """Ascending eigenvalues of A^-1/2 B A^-1/2 for A = R_a^T R_a, B = R_b^T R_b."""
    return np.sort(np.linalg.svd(_solve(a_root, b_root.T, trans="T"), compute_uv=False) ** 2)


def psd_margin(a: Sandwich, b: Sandwich) -> float:
    """lambda_min(a^-1/2 (a - b) a^-1/2) = 1 - lambda_max(a^-1/2 b a^-1/2): >= 0 iff a >= b."""
    return float(1.0 - generalised_eigenvalues(a, b)[-1])


def residual(eigenvalues: np.ndarray) -> float:
    """max |lambda - 1| over generalised eigenvalues: zero iff the two matrices are equal."""
    return float(np.max(np.abs(eigenvalues - 1.0)))


@dataclass(frozen=True)
class Asymptotics:
    hessian: np.ndarray  # H
    cov_pair: np.ndarray  # Cov of the per-(x, K) gradient
    cov_avg: np.ndarray  # Cov of the mask-averaged per-example gradient
    gamma_roots: Sandwich  # H^-1 Cov_pair H^-1 (= H^-1 under realizability)
    gamma_avg_roots: Sandwich  # H^-1 Cov_avg H^-1: the estimator that applies every mask to each x

    @property
    def gamma(self) -> np.ndarray:
        return self.gamma_roots.matrix

    @property
    def gamma_avg(self) -> np.ndarray:
        return self.gamma_avg_roots.matrix

    @property
    def lemma2_residual(self) -> float:
        """max |eig(H^-1/2 Cov_pair H^-1/2) - 1| (zero under realizability)."""
        return residual(np.linalg.svd(self.gamma_roots.ratio, compute_uv=False) ** 2)


def asymptotics(
    family: ExponentialFamily,
    theta: np.ndarray,
    scheme: MaskingScheme,
    data_probs: np.ndarray | None = None,
) -> Asymptotics:
    """Sandwich covariances at `theta`; data default to p_theta itself (realizable case)."""
    if data_probs is None:
        data_probs = np.exp(family.log_probs(theta))
    stats = pl_statistics(family, theta, scheme, data_probs, with_covariance=True, roots=True)
    assert stats.cov_pair is not None and stats.cov_avg is not None
    assert stats.hessian_root is not None and stats.cov_pair_root is not None
    assert stats.cov_avg_root is not None
    h_root = check_root(stats.hessian_root, f"the Hessian of the {scheme.name} loss")
    return Asymptotics(
        stats.hessian,
        stats.cov_pair,
        stats.cov_avg,
        Sandwich(h_root, stats.cov_pair_root),
        Sandwich(h_root, stats.cov_avg_root),
    )


def inverse_fisher_roots(family: ExponentialFamily, theta: np.ndarray) -> Sandwich:
    """I^-1 as a sandwich; `.scaled(C)` gives C I^-1 of Theorems 2 and 3."""
    return inverse_of(check_root(fisher_root(family, theta), "the Fisher information"))


def inverse_fisher(family: ExponentialFamily, theta: np.ndarray) -> np.ndarray:
    return inverse_fisher_roots(family, theta).matrix


def check_root(root: np.ndarray, what: str) -> np.ndarray:
    """Raise a clear error when A = R^T R is singular to working precision; return R."""
    sv = np.linalg.svd(root, compute_uv=False)
    if not np.all(np.isfinite(sv)) or sv[-1] <= sv[0] / SINGULAR_ROOT:
        lo, hi = (sv[-1] ** 2, sv[0] ** 2) if np.all(np.isfinite(sv)) else (np.nan, np.nan)
        raise GmlmError(
            f"{what} is singular (eigenvalues {lo:.3g} .. {hi:.3g}): the parameters are not "
            "identifiable from this masking scheme, or the model is so strongly coupled that "
            "float64 cannot resolve it (use smaller couplings)"
        )
    return root


def sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + a.T)


def _solve(r: np.ndarray, b: np.ndarray, trans: str = "N") -> np.ndarray:
    """R^-1 b (trans='N') or R^-T b (trans='T') for upper-triangular R."""
    return np.asarray(scipy.linalg.solve_triangular(r, b, trans=trans, check_finite=False))
