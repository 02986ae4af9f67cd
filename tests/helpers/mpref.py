"""An independent 50-digit reference for tiny Ising models, written from the definitions (mpmath).

It shares no code with gmlm.theory: states, features, conditionals, moments and eigenvalues are
all recomputed here, in the most literal way (each block centred before it is summed), so that the
tests can hold gmlm's float64 results to a relative accuracy that rounding in float64 alone could
not certify.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np

DIGITS = 50


class MpIsing:
    """p(x) ∝ exp(h.x + sum_{i != j} J_ij x_i x_j) over {-1, +1}^N, with theta = (h, J_{i<j})."""

    def __init__(self, J: np.ndarray, h: np.ndarray, data: np.ndarray | None = None) -> None:
        mp.mp.dps = DIGITS
        self.n = len(h)
        n = self.n
        self.pairs = list(itertools.combinations(range(n), 2))
        self.states = list(itertools.product((-1, 1), repeat=n))  # variable 0 most significant
        self.features = [
            [mp.mpf(x[i]) for i in range(n)] + [mp.mpf(2 * x[i] * x[j]) for i, j in self.pairs]
            for x in self.states
        ]
        energy = [
            sum(mp.mpf(float(h[i])) * x[i] for i in range(n))
            + sum(2 * mp.mpf(float(J[i][j])) * x[i] * x[j] for i, j in self.pairs)
            for x in self.states
        ]
        weights = [mp.exp(e) for e in energy]
        z = mp.fsum(weights)
        self.p = [w / z for w in weights]
        self.data = self.p if data is None else [mp.mpf(float(v)) for v in data]
        self.d = n + len(self.pairs)

    def _blocks(self, mask: tuple[int, ...]) -> list[list[int]]:
        groups: dict[tuple[int, ...], list[int]] = {}
        for s, x in enumerate(self.states):
            key = tuple(x[i] for i in range(self.n) if i not in mask)
            groups.setdefault(key, []).append(s)
        return list(groups.values())

    def _masks(self, k: int) -> list[tuple[int, ...]]:
        return list(itertools.combinations(range(self.n), k))

    def fisher(self) -> mp.matrix:
        return self._cov(range(len(self.states)), self.p)

    def _cov(self, states, probs) -> mp.matrix:
        states = list(states)
        total = mp.fsum(probs[s] for s in states)
        mean = [
            mp.fsum(probs[s] * self.features[s][a] for s in states) / total for a in range(self.d)
        ]
        out = mp.matrix(self.d, self.d)
        for s in states:
            c = [self.features[s][a] - mean[a] for a in range(self.d)]
            for a in range(self.d):
                for b in range(self.d):
                    out[a, b] += probs[s] / total * c[a] * c[b]
        return out

    def hessian(self, k: int) -> mp.matrix:
        """k-PL Hessian at the truth: E_K E_{x ~ data} Cov_p(T | x_-K), each block centred."""
        masks = self._masks(k)
        out = mp.matrix(self.d, self.d)
        for mask in masks:
            for block in self._blocks(mask):
                mass = mp.fsum(self.data[s] for s in block)
                out += (mass / len(masks)) * self._cov(block, self.p)
        return out

    def gamma(self, k: int) -> mp.matrix:
        """H^-1 Cov(per-(x, K) gradient) H^-1 (= H^-1 when the data are p itself)."""
        masks = self._masks(k)
        cov = mp.matrix(self.d, self.d)
        grads: list[tuple[mp.mpf, list[mp.mpf]]] = []
        for mask in masks:
            for block in self._blocks(mask):
                total = mp.fsum(self.p[s] for s in block)
                mean = [
                    mp.fsum(self.p[s] * self.features[s][a] for s in block) / total
                    for a in range(self.d)
                ]
                for s in block:
                    g = [mean[a] - self.features[s][a] for a in range(self.d)]
                    grads.append((self.data[s] / len(masks), g))
        g_bar = [mp.fsum(w * g[a] for w, g in grads) for a in range(self.d)]
        for w, g in grads:
            c = [g[a] - g_bar[a] for a in range(self.d)]
            for a in range(self.d):
                for b in range(self.d):
                    cov[a, b] += w * c[a] * c[b]
        h_inv = mp.inverse(self.hessian(k))
        return h_inv * cov * h_inv

    def poincare(self, k: int) -> mp.mpf:
        """1 / (1 - lambda_2) of k-Gibbs, from the symmetrised transition matrix."""
        size = len(self.states)
        masks = self._masks(k)
        P = mp.matrix(size, size)
        for mask in masks:
            for block in self._blocks(mask):
                total = mp.fsum(self.p[s] for s in block)
                for x in block:
                    for y in block:
                        P[x, y] += self.p[y] / total / len(masks)
        sym = mp.matrix(size, size)
        for x in range(size):
            for y in range(size):
                sym[x, y] = mp.sqrt(self.p[x]) * P[x, y] / mp.sqrt(self.p[y])
        eig = sorted(mp.eigsy(sym, eigvals_only=True))
        return 1 / (1 - eig[-2])


def generalised_eigenvalues(a: mp.matrix, b: mp.matrix) -> list[mp.mpf]:
    """Eigenvalues of a^-1/2 b a^-1/2 (a positive definite), ascending."""
    e, q = mp.eigsy(a)
    root_inv = q * mp.diag([1 / mp.sqrt(v) for v in e]) * q.T
    return sorted(mp.eigsy(root_inv * b * root_inv, eigvals_only=True))


def to_numpy(m: mp.matrix) -> np.ndarray:
    return np.array([[float(m[i, j]) for j in range(m.cols)] for i in range(m.rows)])


def to_mp(a: np.ndarray) -> mp.matrix:
    return mp.matrix([[mp.mpf(float(v)) for v in row] for row in np.atleast_2d(a)])


def relative_error(estimate: np.ndarray, reference: mp.matrix) -> float:
    """max |eig(ref^-1/2 est ref^-1/2) - 1|: the error of est in the metric of ref (scale-free)."""
    eig = generalised_eigenvalues(reference, to_mp(estimate))
    return float(max(abs(v - 1) for v in eig))


def log10(v: float) -> float:
    return math.log10(v) if v > 0 else -math.inf
