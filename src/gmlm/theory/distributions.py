"""Distributions over Omega^N given by a log-potential table, and Ising models.

Ising convention (the paper's Eq. 5, read literally): the sum over i != j runs over *ordered*
pairs, so each unordered pair {i, j} contributes twice:

    p(x) ∝ exp( sum_i h_i x_i + sum_{i != j} J_ij x_i x_j ) = exp( h.x + 2 sum_{i<j} J_ij x_i x_j )

with J symmetric and zero on the diagonal. Every function in gmlm.theory uses this convention;
as an exponential family the parameters are theta = (h_1..h_N, J_ij for i<j) with sufficient
statistics (x_i, 2 x_i x_j).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.special import logsumexp

from gmlm.errors import GmlmError
from gmlm.theory.space import StateSpace


@dataclass(frozen=True, eq=False)
class Distribution:
    """A distribution p over Omega^N, stored as normalised log-probabilities of all S states."""

    space: StateSpace
    log_p: np.ndarray  # (S,)

    @classmethod
    def from_log_potential(cls, space: StateSpace, log_potential: np.ndarray) -> Distribution:
        log_potential = np.asarray(log_potential, dtype=np.float64).reshape(-1)
        if log_potential.shape != (space.size,):
            raise GmlmError(
                f"log-potential has {log_potential.size} entries, expected q^N = {space.size}"
            )
        if np.any(np.isnan(log_potential)) or np.any(log_potential == np.inf):
            raise GmlmError("log-potential must not contain NaN or +inf")
        if not np.any(np.isfinite(log_potential)):
            raise GmlmError("log-potential gives every state zero probability")
        return cls(space, log_potential - logsumexp(log_potential))

    @classmethod
    def from_probs(cls, space: StateSpace, probs: np.ndarray) -> Distribution:
        probs = np.asarray(probs, dtype=np.float64).reshape(-1)
        if np.any(probs < 0) or not np.all(np.isfinite(probs)):
            raise GmlmError("probabilities must be finite and non-negative")
        with np.errstate(divide="ignore"):
            return cls.from_log_potential(space, np.log(probs))

    @cached_property
    def probs(self) -> np.ndarray:
        return np.exp(self.log_p)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n,) state indices drawn i.i.d. from p."""
        if n < 1:
            raise GmlmError(f"number of samples must be >= 1, got {n}")
        cdf = np.cumsum(self.probs)
        cdf /= cdf[-1]
        return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), self.space.size - 1)

    def tv_distance(self, other_probs: np.ndarray) -> float:
        return 0.5 * float(np.abs(self.probs - np.asarray(other_probs)).sum())


def empirical(space: StateSpace, samples: np.ndarray) -> np.ndarray:
    """(S,) empirical distribution of state indices (or (n, N) digit rows)."""
    samples = np.asarray(samples)
    if samples.ndim == 2:
        samples = space.index(samples)
    if samples.size == 0:
        raise GmlmError("the sample set is empty: at least one sample is needed")
    if samples.min() < 0 or samples.max() >= space.size:
        raise GmlmError(f"sample indices must lie in 0..{space.size - 1}")
    return np.bincount(samples, minlength=space.size) / samples.size


@dataclass(frozen=True, eq=False)
class IsingModel:
    """p(x) ∝ exp(h.x + sum_{i != j} J_ij x_i x_j) over {-1, +1}^N (ordered-pair convention)."""

    J: np.ndarray  # (N, N) symmetric, zero diagonal
    h: np.ndarray  # (N,)

    def __post_init__(self) -> None:
        J = np.asarray(self.J, dtype=np.float64)
        h = np.asarray(self.h, dtype=np.float64).reshape(-1)
        n = h.size
        if J.shape != (n, n):
            raise GmlmError(f"J must have shape (N, N) = ({n}, {n}) to match h, got {J.shape}")
        if not (np.all(np.isfinite(J)) and np.all(np.isfinite(h))):
            raise GmlmError("J and h must be finite (found NaN or inf)")
        if not np.allclose(J, J.T, rtol=0, atol=1e-12):
            worst = float(np.max(np.abs(J - J.T)))
            raise GmlmError(f"J must be symmetric (max |J - J^T| = {worst:.3g})")
        if np.any(np.diag(J) != 0):
            raise GmlmError("J must have a zero diagonal (x_i^2 = 1 is a constant)")
        object.__setattr__(self, "J", J)
        object.__setattr__(self, "h", h)

    @property
    def n_vars(self) -> int:
        return int(self.h.size)

    @cached_property
    def space(self) -> StateSpace:
        return StateSpace(self.n_vars, 2)

    @cached_property
    def distribution(self) -> Distribution:
        return Distribution.from_log_potential(self.space, self.log_potential())

    def log_potential(self) -> np.ndarray:
        """(S,) h.x + x^T J x of every state, variable 0 most significant.

        Without an (S, N) table of spins (3 GiB at N = 24): with x = (a, b) split into the first
        and the last half of the variables, x^T J x = a^T J_aa a + b^T J_bb b + 2 a^T J_ab b, so
        all energies are an outer sum plus one (2^|a|, |a|) x (|a|, 2^|b|) matrix product.
        """
        n = self.space.n_vars  # the StateSpace checks the size limit before anything is allocated
        na = n // 2
        a, b = _spins(na), _spins(n - na)
        h, J = self.h, self.J
        ea = a @ h[:na] + np.einsum("si,ij,sj->s", a, J[:na, :na], a)
        eb = b @ h[na:] + np.einsum("si,ij,sj->s", b, J[na:, na:], b)
        energy = 2.0 * (a @ J[:na, na:]) @ b.T
        energy += ea[:, None]
        energy += eb[None, :]
        return energy.reshape(-1)

    @classmethod
    def random(cls, n_vars: int, scale: float, seed: int) -> IsingModel:
        """J_ij (i < j) and h_i i.i.d. N(0, scale^2), from numpy's default_rng(seed)."""
        if not (np.isfinite(scale) and scale >= 0):
            raise GmlmError(f"the coupling scale must be finite and >= 0, got {scale}")
        rng = np.random.default_rng(seed)
        upper = np.triu(rng.normal(0.0, scale, (n_vars, n_vars)), 1)
        return cls(upper + upper.T, rng.normal(0.0, scale, n_vars))

    @property
    def theta(self) -> np.ndarray:
        """(d,) exponential-family parameters (h_1..h_N, J_ij for i<j in row order)."""
        iu = np.triu_indices(self.n_vars, 1)
        return np.concatenate([self.h, self.J[iu]])

    @classmethod
    def from_theta(cls, n_vars: int, theta: np.ndarray) -> IsingModel:
        theta = np.asarray(theta, dtype=np.float64)
        d = ising_dim(n_vars)
        if theta.shape != (d,):
            raise GmlmError(f"theta must have {d} entries for N={n_vars}, got {theta.shape}")
        J = np.zeros((n_vars, n_vars))
        iu = np.triu_indices(n_vars, 1)
        J[iu] = theta[n_vars:]
        return cls(J + J.T, theta[:n_vars].copy())

    @classmethod
    def clique(
        cls, n_vars: int, clique: int | Sequence[int], J: float, h: float | Sequence[float] = 0.0
    ) -> IsingModel:
        """The paper's model: J_ij = J inside a clique C_G, 0 elsewhere; other vertices independent.

        `clique` is either its size (the first |C_G| variables) or the list of its members.
        """
        members = list(range(clique)) if isinstance(clique, int) else sorted(set(clique))
        if len(members) < 2 or members[0] < 0 or members[-1] >= n_vars:
            raise GmlmError(f"the clique needs at least 2 distinct variables in 0..{n_vars - 1}")
        coupling = np.zeros((n_vars, n_vars))
        for a in members:
            for b in members:
                if a != b:
                    coupling[a, b] = J
        fields = np.broadcast_to(np.asarray(h, dtype=np.float64), (n_vars,)).copy()
        return cls(coupling, fields)


def _spins(n: int) -> np.ndarray:
    """(2^n, n) float64 spins -1/+1 of every state of n variables, variable 0 most significant."""
    bits = np.arange(1 << n)[:, None] >> np.arange(n - 1, -1, -1)[None, :]
    return 2.0 * (bits & 1) - 1.0


def ising_dim(n_vars: int) -> int:
    return n_vars + n_vars * (n_vars - 1) // 2


def ising_features(space: StateSpace) -> np.ndarray:
    """(S, d) sufficient statistics (x_i, 2 x_i x_j for i<j) matching :attr:`IsingModel.theta`."""
    x = space.spins
    iu = np.triu_indices(space.n_vars, 1)
    return np.concatenate([x, 2.0 * x[:, iu[0]] * x[:, iu[1]]], axis=1)


def clique_region(space: StateSpace, clique: Sequence[int], sign: int) -> np.ndarray:
    """(S,) bool: states whose clique variables all equal `sign` (R_1 for +1, R_-1 for -1)."""
    spins = space.spins[:, list(clique)]
    return np.all(spins == sign, axis=1)
