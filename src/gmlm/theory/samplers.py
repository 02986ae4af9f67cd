"""Vectorised simulation of many chains at once, as pure `step(state, rng) -> state` functions.

A state is an (M, N) int array of digits 0..q-1 (for Ising models 0 = spin -1, 1 = spin +1), one
row per chain. Every step draws from the exact conditionals of a tabulated distribution, so the
simulated transition probabilities are exactly those of :mod:`gmlm.theory.chains` (tested by
Monte Carlo against the exact matrices). Randomness comes only from the explicit generator.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gmlm.errors import GmlmError
from gmlm.theory.distributions import Distribution
from gmlm.theory.estimators import MaskingScheme

Step = Callable[[np.ndarray, np.random.Generator], np.ndarray]


def _sample_rows(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One categorical draw per row of (M, C) unnormalised log-probabilities."""
    top = logits.max(axis=1, keepdims=True)
    probs = np.exp(logits - top)
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(logits))[:, None] * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), logits.shape[1] - 1)


def resample_blocks(
    dist: Distribution,
    x: np.ndarray,
    blocks: np.ndarray,
    rng: np.random.Generator,
    log_table: np.ndarray | None = None,
) -> np.ndarray:
    """Redraw x[m, blocks[m]] jointly from p(x_K | x_-K) for every chain m.

    blocks: (M, k) distinct variable indices per chain. `log_table` replaces log p (adaptive
    masking uses log p + log p_K(K | x)). Cost O(M q^k N).
    """
    space = dist.space
    m, k = blocks.shape
    assignments = np.array(list(itertools.product(range(space.q), repeat=k)), dtype=np.int64)
    strides = space.strides[blocks]  # (M, k)
    base = space.index(x) - np.sum(x[np.arange(m)[:, None], blocks] * strides, axis=1)
    # (M, q^k): the flat index of every completion of each chain's block
    cand = base[:, None] + np.einsum("ak,mk->ma", assignments, strides)
    table = dist.log_p if log_table is None else log_table
    choice = _sample_rows(table[cand], rng)
    out = x.copy()
    out[np.arange(m)[:, None], blocks] = assignments[choice]
    return out


def k_gibbs_step(dist: Distribution, k: int) -> Step:
    """k-Gibbs: each chain picks its own uniform subset of size k and redraws it jointly."""
    n = dist.space.n_vars
    if not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise GmlmError(f"k must be an integer in 1..N = 1..{n}, got {k!r}")

    def step(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        blocks = np.argsort(rng.random(x.shape), axis=1)[:, :k]
        return resample_blocks(dist, x, blocks, rng)

    return step


def block_dynamics_step(dist: Distribution, scheme: MaskingScheme) -> Step:
    """Block dynamics: K ~ p_K(. | x) per chain, then x_K ~ p(x_K | x_-K, K)."""
    if scheme.n_vars != dist.space.n_vars:
        raise GmlmError("masking scheme and distribution have different N")
    space = dist.space
    log_tables = []
    for i in range(len(scheme.masks)):
        if scheme.adaptive:
            with np.errstate(divide="ignore"):
                log_tables.append(dist.log_p + np.log(scheme.weight(i)))
        else:
            log_tables.append(dist.log_p)

    def step(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if scheme.adaptive:
            weights = scheme.weights[:, space.index(x)].T  # (M, masks)
            with np.errstate(divide="ignore"):
                which = _sample_rows(np.log(weights), rng)
        else:
            which = rng.choice(len(scheme.masks), size=len(x), p=scheme.weights)
        out = x.copy()
        for i in np.unique(which):
            rows = np.flatnonzero(which == i)
            mask = np.array(scheme.masks[i])
            blocks = np.broadcast_to(mask, (len(rows), len(mask)))
            out[rows] = resample_blocks(dist, x[rows], blocks, rng, log_tables[i])
        return out

    return step


def independent_parallel_step(dist: Distribution) -> Step:
    """Independent parallel sampler: every x_i redrawn at once from p(x_i | x_-i) of the old x."""
    space = dist.space
    values = np.arange(space.q)

    def step(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        idx = space.index(x)  # (M,)
        # (M, N, q): index of x with coordinate i set to v
        cand = idx[:, None, None] + (values - x[:, :, None]) * space.strides[None, :, None]
        logits = dist.log_p[cand].reshape(-1, space.q)
        return _sample_rows(logits, rng).reshape(x.shape).astype(x.dtype)

    return step


def run_chains(step: Step, x0: np.ndarray, n_steps: int, rng: np.random.Generator) -> np.ndarray:
    """Advance all chains n_steps; returns the (M, N) final states."""
    x = np.array(x0, copy=True)
    for _ in range(n_steps):
        x = step(x, rng)
    return x


@dataclass(frozen=True)
class HittingTimes:
    steps: np.ndarray  # (M,) first step at which the chain is in the target set; -1 if never
    budget: int

    @property
    def hit(self) -> np.ndarray:
        return self.steps >= 0

    def capped(self) -> np.ndarray:
        """Hitting times with chains that never hit counted as the budget (a lower bound)."""
        return np.where(self.hit, self.steps, self.budget).astype(np.float64)


def hitting_times(
    dist: Distribution,
    step: Step,
    x0: np.ndarray,
    target: np.ndarray,
    budget: int,
    rng: np.random.Generator,
) -> HittingTimes:
    """Steps until each chain first enters `target` ((S,) bool over states), up to `budget`.

    A chain that starts inside the target has hitting time 0. Chains that have hit stop being
    simulated (they cost nothing further).
    """
    target = np.asarray(target, dtype=bool)
    if target.shape != (dist.space.size,):
        raise GmlmError(f"target must be a boolean vector over the {dist.space.size} states")
    if budget < 0:
        raise GmlmError(f"budget must be >= 0, got {budget}")
    x = np.array(x0, copy=True)
    steps = np.full(len(x), -1, dtype=np.int64)
    steps[target[dist.space.index(x)]] = 0
    active = np.flatnonzero(steps < 0)
    for t in range(1, budget + 1):
        if active.size == 0:
            break
        x[active] = step(x[active], rng)
        now = target[dist.space.index(x[active])]
        steps[active[now]] = t
        active = active[~now]
    return HittingTimes(steps, budget)
