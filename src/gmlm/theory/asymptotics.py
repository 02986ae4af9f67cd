"""Exact asymptotic covariances of pseudolikelihood estimators and the paper's inequalities.

Under realizability (data drawn from p_theta*) and with one random mask per example:
    sqrt(n)(theta_hat - theta*) -> N(0, Gamma),  Gamma = H^-1 Cov(grad l) H^-1 = H^-1 (Lemma 2).
Theorem 1: Gamma^{k+1} <= Gamma^k in the PSD order, Gamma^N = I^-1.
Theorems 2/3: Gamma <= C I^-1 with C the Poincare constant of the matching block dynamics.
Margins are reported relative to the size of the matrices compared, so that "zero up to
rounding" reads the same for every model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gmlm.errors import GmlmError
from gmlm.theory.estimators import (
    ExponentialFamily,
    MaskingScheme,
    fisher_information,
    pl_statistics,
)


@dataclass(frozen=True)
class Asymptotics:
    hessian: np.ndarray  # H
    cov_pair: np.ndarray  # Cov of the per-(x, K) gradient
    cov_avg: np.ndarray  # Cov of the mask-averaged per-example gradient
    gamma: np.ndarray  # H^-1 Cov_pair H^-1 (= H^-1 under realizability)
    gamma_avg: np.ndarray  # H^-1 Cov_avg H^-1: the estimator that applies every mask to each x

    @property
    def lemma2_residual(self) -> float:
        """||H - Cov_pair||_2 / ||H||_2 (zero under realizability)."""
        return spectral_norm(self.hessian - self.cov_pair) / spectral_norm(self.hessian)


def asymptotics(
    family: ExponentialFamily,
    theta: np.ndarray,
    scheme: MaskingScheme,
    data_probs: np.ndarray | None = None,
) -> Asymptotics:
    """Sandwich covariances at `theta`; data default to p_theta itself (realizable case)."""
    if data_probs is None:
        data_probs = np.exp(family.log_probs(theta))
    stats = pl_statistics(family, theta, scheme, data_probs, with_covariance=True)
    assert stats.cov_pair is not None and stats.cov_avg is not None
    h_inv = inverse_spd(stats.hessian, what=f"the Hessian of the {scheme.name} loss")
    return Asymptotics(
        stats.hessian,
        stats.cov_pair,
        stats.cov_avg,
        sym(h_inv @ stats.cov_pair @ h_inv),
        sym(h_inv @ stats.cov_avg @ h_inv),
    )


def inverse_fisher(family: ExponentialFamily, theta: np.ndarray) -> np.ndarray:
    return inverse_spd(fisher_information(family, theta), what="the Fisher information")


def inverse_spd(a: np.ndarray, what: str) -> np.ndarray:
    eig = np.linalg.eigvalsh(a)
    if eig[0] <= eig[-1] * 1e-13:
        raise GmlmError(
            f"{what} is singular (eigenvalues {eig[0]:.3g} .. {eig[-1]:.3g}): the parameters are "
            "not identifiable from this masking scheme or the model is degenerate"
        )
    return sym(np.linalg.inv(a))


def sym(a: np.ndarray) -> np.ndarray:
    return 0.5 * (a + a.T)


def spectral_norm(a: np.ndarray) -> float:
    return float(np.max(np.abs(np.linalg.eigvalsh(sym(a)))))


def psd_margin(a: np.ndarray, b: np.ndarray) -> float:
    """Relative PSD margin of a >= b: lambda_min(a - b) / max(||a||, ||b||); >= 0 iff a >= b."""
    scale = max(spectral_norm(a), spectral_norm(b))
    return float(np.linalg.eigvalsh(sym(a - b))[0]) / scale
