"""Exact Markov chains over Omega^N: block dynamics, k-Gibbs, the independent parallel sampler.

Block dynamics for a masking scheme (Definitions 6, 8, 10): from x, draw K ~ p_K(. | x), then
redraw x_K from p(x_K | x_-K, K) ∝ p(x) p_K(K | x) on the block of x. For fixed masks
(p_K(K | x) = p_K(K)) this is weighted block dynamics; all size-k subsets uniformly is k-Gibbs.
For adaptive masks we use the chain on X obtained by drawing a fresh K at every step
(Definition 8's chain on (X, K) seen through X): it is reversible with respect to p, its
Dirichlet form is E_{x, K} Var(f | x_-K, K), so its Poincare constant C gives
Gamma_adaptive <= C I^-1 (Theorem 3) by the same argument as Theorem 2.

Each P_K is a conditional expectation, hence self-adjoint and positive semi-definite in L2(p);
so is P = sum_K p_K P_K, whose eigenvalues lie in [0, 1]. The Poincare constant is
C = 1 / (1 - lambda_2) with lambda_2 the second largest eigenvalue; it is computed from the
symmetrised matrix D^1/2 P D^-1/2: dense for small S, Lanczos on a matrix-free operator beyond,
and for 1-Gibbs on binary variables the dedicated operator of :mod:`gmlm.theory.single_site`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg as spla
from scipy.sparse.csgraph import connected_components

from gmlm.errors import GmlmError
from gmlm.theory.asymptotics import root_eigenvalues
from gmlm.theory.distributions import Distribution
from gmlm.theory.estimators import ExponentialFamily, MaskingScheme, pl_statistics
from gmlm.theory.single_site import DeadlineExceeded, single_site_gap
from gmlm.theory.space import MAX_DENSE_STATES, block_log_softmax

#: Conditionals of all masks are cached up to this many float64 entries (256 MiB).
CACHE_ENTRIES = 1 << 25
#: Below this many states the Poincare constant is computed from the dense matrix.
DENSE_LIMIT = 2048


@dataclass(frozen=True, eq=False)
class BlockDynamics:
    """The transition operator of block dynamics for `scheme` with stationary law `dist`."""

    dist: Distribution
    scheme: MaskingScheme

    def __post_init__(self) -> None:
        if self.scheme.n_vars != self.dist.space.n_vars:
            raise GmlmError(
                f"masking scheme is for N={self.scheme.n_vars}, distribution has "
                f"N={self.dist.space.n_vars}"
            )

    @cached_property
    def _cache(self) -> dict[int, np.ndarray]:
        return {}

    def _conditionals(self, i: int) -> np.ndarray:
        """(q,)*N array: p(y_K | y_-K, K_i) at every state y (cached while memory allows)."""
        if i in self._cache:
            return self._cache[i]
        space = self.dist.space
        mask = self.scheme.masks[i]
        log_q = self.dist.log_p
        if self.scheme.adaptive:
            with np.errstate(divide="ignore"):
                log_q = log_q + np.log(self.scheme.weight(i))
        cond = np.exp(block_log_softmax(space.to_blocks(log_q, mask)))
        cond = space.from_blocks(cond, mask).reshape(space.shape)
        if (len(self._cache) + 1) * space.size <= CACHE_ENTRIES:
            self._cache[i] = cond
        return cond

    def apply(
        self, f: np.ndarray, on_block: Callable[[int, int], None] | None = None
    ) -> np.ndarray:
        """(P f)(x) = E[f(X') | X = x] for f of shape (S,) or (S, m); `on_block(done, total)`
        is called after each block (mask) of the scheme, for progress reports."""
        space = self.dist.space
        f = np.asarray(f, dtype=np.float64)
        extra = f.shape[1:]
        f_arr = f.reshape(space.shape + extra)
        tail = (1,) * len(extra)
        out = np.zeros(space.shape + extra)
        for i, mask in enumerate(self.scheme.masks):
            cond = self._conditionals(i).reshape(space.shape + tail)
            expect = np.sum(cond * f_arr, axis=mask, keepdims=True)  # constant on each block
            w = self.scheme.weight(i)
            out += (w.reshape(space.shape + tail) if self.scheme.adaptive else w) * expect
            if on_block is not None:
                on_block(i + 1, len(self.scheme.masks))
        return out.reshape(f.shape)

    def matrix(self) -> np.ndarray:
        """Dense (S, S) transition matrix P[x, y] (small S only)."""
        size = self.dist.space.size
        if size > MAX_DENSE_STATES:
            raise GmlmError(
                f"a dense transition matrix over {size:,} states is too large (limit "
                f"{MAX_DENSE_STATES:,}); use poincare_constant, which is matrix-free"
            )
        return self.apply(np.eye(size))


@dataclass(frozen=True)
class SpectralGap:
    lambda2: float  # second largest eigenvalue of P
    gap: float  # 1 - lambda2
    poincare: float  # 1 / gap (inf for a reducible chain)
    method: str  # "dense", "lanczos" or "single-site"


#: Eigenvectors of the slowest modes that the dense method refines (Rayleigh-Ritz).
RITZ_VECTORS = 8
#: Gaps below this are not resolved in float64 (the Ritz gap's error is ~(eps * ||E||)^2 there).
UNRESOLVED_GAP = 1e-28
#: Lanczos vectors ARPACK keeps for the top eigenpair (eigsh's default ncv for k = 1, at most
#: the number of states): it applies the operator at least this many times.
ARPACK_VECTORS = 20

#: progress(applications, blocks, total_blocks): called as a matrix-free method runs, after each
#: block of an operator application (blocks of total_blocks done in the application under way)
#: and after each whole application (blocks = total_blocks = 0).
Progress = Callable[[int, int, int], None]


def poincare_method(states: int, single_site: bool, method: str = "auto") -> str:
    """The method "auto" picks (see :func:`poincare_constant`) for a chain over `states`
    states that is (or not) 1-Gibbs on binary variables; other methods as given."""
    if method != "auto":
        return method
    if states <= DENSE_LIMIT:
        return "dense"
    return "single-site" if single_site else "lanczos"


def poincare_constant(
    chain: BlockDynamics,
    method: str = "auto",
    tol: float = 1e-12,
    deadline: float | None = None,
    threads: int | None = None,
    progress: Progress | None = None,
) -> SpectralGap:
    """Exact Poincare constant of a reversible block dynamics from its spectral gap.

    Methods: "dense" (eigendecomposition, S <= MAX_DENSE_STATES), "lanczos" (ARPACK on the
    matrix-free :meth:`BlockDynamics.apply`, any scheme), "single-site" (the dedicated 1-Gibbs
    operator of :mod:`gmlm.theory.single_site`, binary variables only, up to N = 24 with
    `threads`); "auto" picks dense up to DENSE_LIMIT states, then single-site where it applies,
    else lanczos. `deadline` (a time.perf_counter() value) stops the matrix-free methods with
    :class:`DeadlineExceeded`; `progress` follows them (see :data:`Progress`).

    The eigensolver finds the slowest modes to an absolute accuracy ~eps in lambda, which is a
    relative error ~eps / gap in C: 1e-6 for the gaps ~1e-10 of strongly coupled models. So its
    eigenvectors are only used as a subspace, in which the gap is recomputed (Rayleigh-Ritz) from
    the Dirichlet form E(f) = E_K E_x Var(f | x_-K, K) and Var(f), each through the root of its
    block-centred rows (:func:`gmlm.theory.estimators.pl_statistics`): the gap then carries a
    relative error ~eps / sqrt(gap) at worst. A Ritz value can only overestimate the gap, and the
    error is quadratic in the eigenvectors' error, which is why a rough subspace suffices.
    """
    p = chain.dist.probs
    if np.any(p <= 0):
        raise GmlmError("the Poincare constant needs p(x) > 0 for every state (restrict the space)")
    size = chain.dist.space.size
    method = poincare_method(size, is_single_site(chain), method)
    if method == "single-site":
        if not is_single_site(chain):
            raise GmlmError(
                "method 'single-site' is 1-Gibbs on binary variables only (k = 1, uniform over "
                "the sites, q = 2); use lanczos for other block dynamics"
            )
        result = single_site_gap(
            chain.dist.log_p,
            threads=threads,
            deadline=deadline,
            progress=None if progress is None else lambda done: progress(done, 0, 0),
        )
        return _spectral_gap(chain, result.gap, method)
    if method not in ("dense", "lanczos"):
        raise GmlmError(f"unknown method '{method}': choose auto, dense, lanczos or single-site")
    root = np.sqrt(p)
    if method == "dense":
        if size > MAX_DENSE_STATES:
            raise GmlmError(
                f"method 'dense' over {size:,} states is too large (limit {MAX_DENSE_STATES:,}); "
                "use lanczos or single-site"
            )
        sym = root[:, None] * chain.matrix() / root[None, :]
        sym = 0.5 * (sym + sym.T) - np.outer(root, root)  # deflate the top eigenvector sqrt(p)
        m = min(RITZ_VECTORS, size - 1)
        vectors = scipy.linalg.eigh(sym, subset_by_index=[size - m, size - 1])[1]
    else:
        applications = 0

        def on_block(done: int, total: int) -> None:
            if progress is not None:
                progress(applications, done, total)

        def matvec(v: np.ndarray) -> np.ndarray:
            nonlocal applications
            if deadline is not None and time.perf_counter() > deadline:
                raise DeadlineExceeded("the Lanczos iteration was stopped at its time limit")
            v = np.asarray(v).reshape(-1)
            out = root * chain.apply(v / root, on_block)
            applications += 1
            if progress is not None:
                progress(applications, 0, 0)
            return np.asarray(out - root * float(root @ v))

        op = spla.LinearOperator((size, size), matvec=matvec, dtype=np.float64)
        v0 = np.random.default_rng(0).standard_normal(size)
        vectors = spla.eigsh(op, k=1, which="LA", tol=tol, v0=v0)[1]
    return _spectral_gap(chain, ritz_gap(chain, vectors), method)


def _spectral_gap(chain: BlockDynamics, gap: float, method: str) -> SpectralGap:
    """The result, after telling an exactly zero gap (reducible) from one float64 cannot resolve."""
    if gap <= UNRESOLVED_GAP:
        if not reducible(chain):
            raise GmlmError(
                f"the spectral gap is below {UNRESOLVED_GAP:g}, where float64 no longer resolves "
                "it: the chain is irreducible but metastable beyond double precision (C > "
                f"{1 / UNRESOLVED_GAP:g}); use weaker couplings"
            )
        gap = 0.0
    return SpectralGap(1.0 - gap, gap, 1.0 / gap if gap > 0 else float("inf"), method)


def reducible(chain: BlockDynamics) -> bool:
    """Whether the chain's transition graph over the states (all with p > 0) is disconnected."""
    scheme = chain.scheme
    if scheme.adaptive and not np.all(scheme.weights > 0):
        if chain.dist.space.size > MAX_DENSE_STATES:
            raise GmlmError(
                "cannot decide whether an adaptive scheme with zero mask probabilities is "
                f"irreducible over more than {MAX_DENSE_STATES:,} states"
            )
        graph = scipy.sparse.csr_matrix(chain.matrix() > 0)
        return int(connected_components(graph, directed=False)[0]) > 1
    # every block redraw has full support (p > 0), so the chain moves every variable some mask
    # with positive probability contains, and only those
    weights = scheme.weights.min(axis=1) if scheme.adaptive else scheme.weights
    covered = {i for mask, w in zip(scheme.masks, weights, strict=True) if w > 0 for i in mask}
    return len(covered) < chain.dist.space.n_vars


def is_single_site(chain: BlockDynamics) -> bool:
    """Whether the chain is 1-Gibbs on binary variables (the single-site operator applies)."""
    scheme, n = chain.scheme, chain.dist.space.n_vars
    return (
        chain.dist.space.q == 2
        and not scheme.adaptive
        and scheme.masks == tuple((i,) for i in range(n))
        and bool(np.all(scheme.weights == scheme.weights[0]))
    )


def ritz_gap(chain: BlockDynamics, vectors: np.ndarray) -> float:
    """min over f in span(vectors / sqrt(p)), f not constant, of E(f) / Var(f).

    vectors: (S, m) in the symmetrised coordinates sqrt(p) f.
    """
    dist = chain.dist
    root = np.sqrt(dist.probs)
    v = vectors - root[:, None] * (root @ vectors)[None, :]  # drop the constant direction
    basis, sv, _ = np.linalg.svd(v, full_matrices=False)
    f = basis[:, sv > 0.5 * sv[0]] / root[:, None]  # (S, m') orthonormal in L2(p)
    family = ExponentialFamily(dist.space, f, base=dist.log_p)
    zero = np.zeros(f.shape[1])
    var = pl_statistics(family, zero, MaskingScheme.mle(dist.space.n_vars), dist.probs, roots=True)
    dirichlet = pl_statistics(family, zero, chain.scheme, dist.probs, roots=True)
    assert var.hessian_root is not None and dirichlet.hessian_root is not None
    return float(root_eigenvalues(var.hessian_root, dirichlet.hessian_root)[0])


def k_gibbs(dist: Distribution, k: int) -> BlockDynamics:
    """k-Gibbs (Definition 10): K uniform among the subsets of size k."""
    return BlockDynamics(dist, MaskingScheme.k_pl(dist.space.n_vars, k))


def single_site_conditionals(dist: Distribution) -> np.ndarray:
    """(N, S, q) p(x_i = v | x_-i) for every variable i, state x and value v."""
    space = dist.space
    out = np.empty((space.n_vars, space.size, space.q))
    for i in range(space.n_vars):
        cond = np.exp(block_log_softmax(space.to_blocks(dist.log_p, (i,))))  # (B, q)
        out[i] = space.from_blocks(np.broadcast_to(cond[:, None, :], (*cond.shape, space.q)), (i,))
    return out


def independent_parallel_matrix(dist: Distribution) -> np.ndarray:
    """Dense (S, S) transition of the independent parallel sampler (Definition 11).

    P[x, y] = prod_i p(y_i | x_-i): every coordinate redrawn at once from its conditional.
    """
    space = dist.space
    if space.size > MAX_DENSE_STATES:
        raise GmlmError(
            f"the independent parallel sampler's matrix over {space.size:,} states is too large "
            f"(limit {MAX_DENSE_STATES:,} states, i.e. N <= 13 for binary variables)"
        )
    cond = single_site_conditionals(dist)
    with np.errstate(divide="ignore"):
        log_cond = np.log(cond)
    log_p = np.zeros((space.size, space.size))
    digits = space.states
    for i in range(space.n_vars):
        log_p += log_cond[i][:, digits[:, i]]
    return np.exp(log_p)


def stationary_distribution(matrix: np.ndarray) -> np.ndarray:
    """The stationary law pi = pi P of an irreducible chain.

    Uses the Grassmann-Taksar-Heyman state reduction, which involves no subtractions and so stays
    accurate for nearly decomposable (metastable) chains such as the independent parallel sampler
    on a strongly coupled Ising model, where a plain linear solve loses all precision.
    """
    a = np.array(matrix, dtype=np.float64)
    size = a.shape[0]
    for n in range(size - 1, 0, -1):
        out_mass = a[n, :n].sum()
        if out_mass <= 0:
            raise GmlmError("the chain is reducible: no unique stationary distribution")
        a[:n, n] /= out_mass
        a[:n, :n] += np.outer(a[:n, n], a[n, :n])
    pi = np.zeros(size)
    pi[0] = 1.0
    for j in range(1, size):
        pi[j] = pi[:j] @ a[:j, j]
    return pi / pi.sum()


@dataclass(frozen=True)
class ParallelSamplerReport:
    stationary: np.ndarray  # (S,)
    tv_to_p: float
    poincare_k1: float  # for context: 1-Gibbs on the same p


def independent_parallel_report(dist: Distribution) -> ParallelSamplerReport:
    """How far the independent parallel sampler's own stationary law is from p."""
    pi = stationary_distribution(independent_parallel_matrix(dist))
    return ParallelSamplerReport(
        pi, dist.tv_distance(pi), poincare_constant(k_gibbs(dist, 1)).poincare
    )
