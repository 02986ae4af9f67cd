"""1-Gibbs (single-site heat bath) on {0, 1}^N as a matrix-free symmetric operator, for N up to 24.

States are the integers 0..2^N-1 with variable i at bit N-1-i (the C order of
:class:`gmlm.theory.space.StateSpace`), so flipping variable i pairs s with s ^ (1 << (N-1-i)).
In the coordinates v = sqrt(p) f the transition operator is symmetric:

    (P v)(x) = d(x) v(x) + sum_i s_i(x_-i) v(x ^ e_i),
    d(x) = (1/N) sum_i p(x_i | x_-i),   s_i = sqrt(p(0 | x_-i) p(1 | x_-i)) / N
                                             = 1 / (2N cosh(delta_i / 2)),

with delta_i = log p(x_i = 1, x_-i) - log p(x_i = 0, x_-i). Each s_i is stored once per pair
(2^(N-1) float64 values), so the operator is exactly symmetric.

The matrix-vector product never builds an index array or loops over states in Python. A vector
is viewed as a (2^h, 2^t) matrix, rows indexed by the first h = N - t variables and columns by
the last t (2^t ~ 2^16 states, an L2-sized tile). Pass 1 walks over row tiles: the diagonal and
the column variables, whose partners lie in the same row, each a reshape to (., 2, 2^b) whose
middle axis is swapped. The last 6 variables would give numpy inner loops of 1..32 elements, so
they act on a transposed copy of the tile, where their runs are 2^t / 64 long. Pass 2 walks over
column tiles (every row, a few columns) for the row variables. Tiles are disjoint, so a thread
pool splits them (numpy releases the GIL); each output element is computed by the same
operations whatever the thread count, so results do not depend on it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from scipy.linalg import blas
from scipy.special import expit

from gmlm.errors import GmlmError
from gmlm.theory.space import MAX_STATES

#: Elements per tile: two float64 tiles and their entries stay in a 1-2 MiB L2 cache.
TILE = 1 << 16
#: Steps between two convergence checks of the Lanczos recurrence: it stops at a multiple.
CHECK_EVERY = 5
#: Variables whose partners lie fewer than 2^FINE_BITS states away are applied to a transposed tile.
FINE_BITS = 6


class DeadlineExceeded(GmlmError):
    """A matrix-free computation ran past its time limit and was stopped."""


def default_threads() -> int:
    """OMP_NUM_THREADS if set, else the CPUs this process may run on."""
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class SingleSiteGibbs:
    """The symmetrised 1-Gibbs operator of the distribution with normalised log-probabilities."""

    def __init__(self, log_p: np.ndarray, threads: int = 1):
        log_p = np.asarray(log_p, dtype=np.float64).reshape(-1)
        size = log_p.size
        n = size.bit_length() - 1
        if size < 2 or size != 1 << n:
            raise GmlmError(f"a binary state space has 2^N states, got {size}")
        if size > MAX_STATES:
            raise GmlmError(
                f"N={n} has {size:,} states; the 1-Gibbs operator is limited to {MAX_STATES:,} "
                f"(N <= {MAX_STATES.bit_length() - 1}): it holds N/2 + 3 float64 vectors over "
                "all states"
            )
        if not np.all(np.isfinite(log_p)):
            raise GmlmError("1-Gibbs needs p(x) > 0 for every state (log p finite)")
        if threads < 1:
            raise GmlmError(f"threads must be >= 1, got {threads}")
        self.n_vars = n
        self.size = size
        self.threads = threads
        self.log_p = log_p
        self.root = np.exp(0.5 * log_p)  # sqrt(p): the eigenvector of eigenvalue 1
        self.low = min(n, TILE.bit_length() - 1)  # t: variables inside a row
        self.rows = size >> self.low
        self.cols = 1 << self.low
        self.tile_rows = min(self.rows, max(1, TILE // self.cols))
        tile = self.tile_rows * self.cols
        # the last `fine` variables flip within runs shorter than 2^fine, too short for numpy's
        # inner loops: they are applied to a transposed copy of each tile instead
        self.fine = FINE_BITS if self.low >= FINE_BITS + 2 else 0
        self.diag = np.zeros(size)
        self.entries: list[np.ndarray] = []
        for i in range(n):
            delta = self._pairs(log_p, i)
            delta = delta[:, 1, :] - delta[:, 0, :]  # (2^i, 2^(N-1-i))
            stay = self._pairs(self.diag, i)
            stay[:, 1, :] += expit(delta)
            stay[:, 0, :] += expit(-delta)
            with np.errstate(over="ignore"):
                entries = (0.5 / n / np.cosh(0.5 * delta)).ravel()
            if i >= n - self.fine:  # (tiles, 2^(fine-1), tile / 2^fine): tile-transposed
                entries = entries.reshape(size // tile, tile >> self.fine, -1)
                entries = np.ascontiguousarray(entries.transpose(0, 2, 1))
            self.entries.append(entries)
        self.diag /= n
        self._pool = ThreadPoolExecutor(threads) if threads > 1 else None
        self.deadline: float | None = None
        self.matvecs = 0

    def _pairs(self, v: np.ndarray, i: int) -> np.ndarray:
        """(S,) -> (2^i, 2, 2^(N-1-i)) view: the middle axis is variable i."""
        return v.reshape(1 << i, 2, self.size >> (i + 1))

    @property
    def nbytes(self) -> int:
        """Memory held by the operator's arrays."""
        arrays = [self.log_p, self.root, self.diag, *self.entries]
        return int(sum(a.nbytes for a in arrays))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def apply(self, v: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """(S,) -> (S,) P v in the symmetrised coordinates (into `out`, distinct from v)."""
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise DeadlineExceeded(
                f"stopped after {self.matvecs} matrix-vector products: the time limit was reached"
            )
        self.matvecs += 1
        v = np.ascontiguousarray(v, dtype=np.float64).reshape(-1)
        out = np.empty_like(v) if out is None else out
        rows = [
            (a, min(a + self.tile_rows, self.rows)) for a in range(0, self.rows, self.tile_rows)
        ]
        self._run(self._row_tile, rows, v, out)
        if self.rows > 1:
            width = max(1, min(self.cols, TILE // self.rows))
            cols = [(a, min(a + width, self.cols)) for a in range(0, self.cols, width)]
            self._run(self._column_tile, cols, v, out)
        return out

    def _run(
        self,
        tile: Callable[[np.ndarray, np.ndarray, int, int, np.ndarray], None],
        ranges: list[tuple[int, int]],
        v: np.ndarray,
        out: np.ndarray,
    ) -> None:
        # per worker: a scratch product, a transposed tile of v and one of out
        size = max(TILE, self.rows, self.cols)
        if self._pool is None:
            buf = np.empty((3, size))
            for a, b in ranges:
                tile(v, out, a, b, buf)
            return
        groups = [ranges[w :: self.threads] for w in range(self.threads)]

        def work(group: list[tuple[int, int]]) -> None:
            buf = np.empty((3, size))
            for a, b in group:
                tile(v, out, a, b, buf)

        for future in [self._pool.submit(work, g) for g in groups if g]:
            future.result()

    def _row_tile(self, v: np.ndarray, out: np.ndarray, r0: int, r1: int, buf: np.ndarray) -> None:
        """Rows r0:r1: out = d v + the terms of the variables inside a row (the last t)."""
        n, c = self.n_vars, self.cols
        vt = v[r0 * c : r1 * c]
        ot = out[r0 * c : r1 * c]
        np.multiply(self.diag[r0 * c : r1 * c], vt, out=ot)
        half = (r1 - r0) * c // 2
        for i in range(n - self.low, n - self.fine):
            stride = self.size >> (i + 1)
            entries = self.entries[i][r0 * c // 2 : r0 * c // 2 + half].reshape(-1, stride)
            _flip_add(vt.reshape(-1, 2, stride), ot.reshape(-1, 2, stride), entries, buf[0])
        if not self.fine:
            return
        g = 1 << self.fine
        length = vt.size // g
        v_t = buf[1, : vt.size].reshape(g, length)
        np.copyto(v_t, vt.reshape(length, g).T)
        o_t = buf[2, : vt.size].reshape(g, length)
        o_t.fill(0.0)
        tile = r0 // self.tile_rows
        for i in range(n - self.fine, n):
            stride = self.size >> (i + 1)
            entries = self.entries[i][tile].reshape(-1, stride, length)
            _flip_add(
                v_t.reshape(-1, 2, stride, length),
                o_t.reshape(-1, 2, stride, length),
                entries,
                buf[0],
            )
        back = ot.reshape(length, g)
        np.add(back, o_t.T, out=back)

    def _column_tile(
        self, v: np.ndarray, out: np.ndarray, c0: int, c1: int, buf: np.ndarray
    ) -> None:
        """Columns c0:c1 of every row: the terms of the variables that select the row."""
        vt = v.reshape(self.rows, self.cols)[:, c0:c1]
        ot = out.reshape(self.rows, self.cols)[:, c0:c1]
        for i in range(self.n_vars - self.low):
            stride = self.rows >> (i + 1)
            entries = self.entries[i].reshape(-1, stride, self.cols)[:, :, c0:c1]
            _flip_add(
                vt.reshape(-1, 2, stride, c1 - c0),
                ot.reshape(-1, 2, stride, c1 - c0),
                entries,
                buf[0],
            )

    def dirichlet(self, v: np.ndarray) -> float:
        """<v, (I - P) v> in float64 from the definition: sum over i and pairs (x0, x1) of
        (sqrt(p(0|x_-i)) v(x1) - sqrt(p(1|x_-i)) v(x0))^2 / N, a sum of squares without
        cancellation against <v, v> (sqrt(p) gives exactly zero)."""
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        total = 0.0
        for i in range(self.n_vars):
            lp = self._pairs(self.log_p, i)
            delta = lp[:, 1, :] - lp[:, 0, :]
            pairs = self._pairs(v, i)
            term = np.sqrt(expit(-delta)) * pairs[:, 1, :] - np.sqrt(expit(delta)) * pairs[:, 0, :]
            total += float(np.einsum("ij,ij->", term, term))
        return total / self.n_vars


def _flip_add(v: np.ndarray, out: np.ndarray, entries: np.ndarray, buf: np.ndarray) -> None:
    """out[:, 0] += s * v[:, 1] and out[:, 1] += s * v[:, 0] (axis 1 is the flipped variable).

    Two ufunc calls over the whole tile: v[:, ::-1] is the flipped view, s broadcasts over it.
    """
    scratch = buf[: v.size].reshape(v.shape)
    np.multiply(entries[:, None], v[:, ::-1], out=scratch)
    np.add(out, scratch, out=out)


@dataclass(frozen=True)
class SingleSiteGap:
    gap: float  # 1 - lambda_2
    lanczos_lambda2: float  # the top Ritz value of the Lanczos recurrence
    refined: bool  # gap recomputed from the Ritz vector's Dirichlet form (small gaps)
    steps: int  # Lanczos steps (matrix-vector products: steps, or 2 * steps when refined)
    operator_bytes: int


#: Below this gap the Ritz value's absolute error ~1e-16 would exceed 1e-10 of the gap, so the
#: gap is recomputed from the Ritz vector through the Dirichlet form (a second Lanczos pass).
REFINE_BELOW = 1e-5


def single_site_gap(
    log_p: np.ndarray,
    threads: int | None = None,
    tol: float = 1e-10,
    deadline: float | None = None,
    max_steps: int = 5000,
    progress: Callable[[int], None] | None = None,
) -> SingleSiteGap:
    """Spectral gap of 1-Gibbs for the normalised log-probabilities `log_p` of 2^N states.

    Plain Lanczos on P with sqrt(p) deflated, without reorthogonalisation: the top Ritz value
    of the three-term recurrence converges to lambda_2 to working accuracy (lost orthogonality
    only adds copies of converged values), and it needs four vectors where a restarted
    Arnoldi basis needs twenty (2.7 GiB at N = 24) and reads all of them at every step.
    `progress(applications)` is called after each application of the operator.
    """
    op = SingleSiteGibbs(log_p, threads=default_threads() if threads is None else threads)
    op.deadline = deadline
    try:
        root = op.root

        applications = 0

        def matvec(v: np.ndarray, out: np.ndarray) -> None:
            nonlocal applications
            op.apply(v, out)
            _axpy(-float(root @ v), root, out)  # deflate sqrt(p), the eigenvalue 1
            applications += 1
            if progress is not None:
                progress(applications)

        v0 = np.random.default_rng(0).standard_normal(op.size)
        _axpy(-float(root @ v0), root, v0)
        lanczos = Lanczos(matvec, v0)
        theta, coeffs = lanczos.top(tol, max_steps, relative=REFINE_BELOW)
        steps = coeffs.size
        if 1.0 - theta >= REFINE_BELOW:
            return SingleSiteGap(1.0 - theta, theta, False, steps, op.nbytes)
        vector = lanczos.vector(coeffs)
        _axpy(-float(root @ vector), root, vector)
        gap = op.dirichlet(vector) / float(vector @ vector)
        return SingleSiteGap(gap, theta, True, steps, op.nbytes)
    finally:
        op.close()


class Lanczos:
    """The three-term Lanczos recurrence of a symmetric operator, in three reused (S,) buffers.

    matvec(v, out) writes A v into out. Every update is an in-place BLAS call: temporaries of
    2^24 float64 would add a pass over memory and fresh pages at every step.
    """

    def __init__(self, matvec: Callable[[np.ndarray, np.ndarray], None], v0: np.ndarray):
        self.matvec = matvec
        self.v0 = np.asarray(v0, dtype=np.float64) / float(np.linalg.norm(v0))

    def _steps(self) -> Iterator[tuple[float, float, np.ndarray]]:
        """Yields (alpha_j, beta_j, v_j) for j = 1, 2, ...; v_j is overwritten afterwards."""
        v = self.v0.copy()
        previous = np.zeros_like(v)
        w = np.empty_like(v)
        beta = 0.0
        while True:
            self.matvec(v, w)
            alpha = float(v @ w)
            _axpy(-alpha, v, w)
            _axpy(-beta, previous, w)
            next_beta = float(np.linalg.norm(w))
            yield alpha, next_beta, v
            if next_beta == 0.0:
                return
            w *= 1.0 / next_beta
            previous, v, w = v, w, previous
            beta = next_beta

    def top(
        self, tol: float, max_steps: int, check_every: int = CHECK_EVERY, relative: float = 0.0
    ) -> tuple[float, np.ndarray]:
        """Largest eigenvalue and its Ritz vector's coefficients (steps,) in the Lanczos basis.

        Stops when the residual norm r = beta_m |s_m| of the top Ritz pair is below tol and,
        when the gap g = 1 - theta is below `relative`, below 1e-7 sqrt(g) (floored at 1e-15)
        too: the Ritz vector's Rayleigh quotient is then off by r^2 / delta (delta the distance
        to the next eigenvalue), which must stay within ~1e-10 g to refine a small gap.
        """
        alphas: list[float] = []
        betas: list[float] = []
        residual = float("inf")
        for step, (alpha, beta, _) in enumerate(self._steps(), start=1):
            alphas.append(alpha)
            betas.append(beta)
            if step % check_every and beta > 0.0 and step < max_steps:
                continue
            theta, s = _top_ritz(alphas, betas)
            residual = beta * abs(s[-1])
            target = tol
            if 1.0 - theta < relative:
                target = min(tol, max(1e-7 * np.sqrt(max(1.0 - theta, 0.0)), 1e-15))
            if residual <= target or beta == 0.0:
                return theta, s
            if step >= max_steps:
                break
        raise GmlmError(
            f"Lanczos did not converge in {max_steps} steps (residual {residual:.2g}); the "
            "spectral gap may be too small to resolve"
        )

    def vector(self, coeffs: np.ndarray) -> np.ndarray:
        """sum_j coeffs[j] v_j: the Ritz vector, by running the same recurrence again."""
        out = np.zeros_like(self.v0)
        for c, (_, _, v) in zip(coeffs, self._steps(), strict=False):
            _axpy(float(c), v, out)
        return out


def _axpy(a: float, x: np.ndarray, y: np.ndarray) -> None:
    """y += a x in place (BLAS daxpy: one pass, no temporary)."""
    blas.daxpy(x, y, a=a)


def _top_ritz(alphas: list[float], betas: list[float]) -> tuple[float, np.ndarray]:
    m = len(alphas)
    if m == 1:
        return alphas[0], np.ones(1)
    w, s = scipy.linalg.eigh_tridiagonal(
        np.array(alphas), np.array(betas[:-1]), select="i", select_range=(m - 1, m - 1)
    )
    return float(w[0]), s[:, 0]
