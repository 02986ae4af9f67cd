"""Propositions 4 and 5: predicted escape behaviour of k-Gibbs and the independent parallel sampler.

Both are computed exactly for a clique-plus-independent-vertices Ising model instead of through
the paper's closed-form constants:

- Proposition 4 (k-Gibbs, k >= |C_G|): from any state, one step lands in R_1 with probability at
  least s = [C(N-|C_G|, k-|C_G|) / C(N, k)] * p(x_C = +1 | x_-K), because with that probability K
  contains the whole clique, and the clique (coupled to nothing outside it) is then redrawn from its
  own marginal. Hence P(tau > T) <= (1 - s)^T, E[tau] <= 1 / s and T(delta) = ceil(log delta /
  log(1 - s)), the paper's T = ceil(log_c delta) with c = 1 - s. The paper lower-bounds the
  clique probability in closed form; we use its exact value, which gives a tighter prediction.
- Proposition 5 (independent parallel sampler): on A = {x : sum_{i in C_G} x_i <= -2}, the exact
  one-step escape probability eps(x) = P(sum_C y_i > -2 | x) under the product transition is a
  Poisson-binomial tail. With eps_max = max_{x in A} eps(x), a chain started in A stays there
  for T steps with probability >= 1 - T eps_max (union bound), so E[exit time] >= 1 / eps_max.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gmlm.errors import GmlmError
from gmlm.theory.chains import single_site_conditionals
from gmlm.theory.distributions import IsingModel


@dataclass(frozen=True)
class Prop4Prediction:
    k: int
    step_probability: float  # s: lower bound on P(enter R_1 in one step) from any state
    expected_steps_bound: float  # 1 / s
    steps_for_delta: dict[float, int]  # T such that P(not in R_1 after T steps) <= delta


def proposition4(
    model: IsingModel, clique: Sequence[int], k: int, deltas: Sequence[float] = (0.5, 0.1, 0.01)
) -> Prop4Prediction | None:
    """Prediction for k-Gibbs reaching R_1, or None when k < |C_G| (outside the proposition)."""
    n, c = model.n_vars, len(clique)
    if not 1 <= k <= n:
        raise GmlmError(f"k must be in 1..N = 1..{n}, got {k}")
    _check_isolated_clique(model, clique)
    if k < c:
        return None
    contain = math.comb(n - c, k - c) / math.comb(n, k)
    spins = np.array([[1.0 if b else -1.0 for b in bits] for bits in np.ndindex(*(2,) * c)])
    sub_j = model.J[np.ix_(clique, clique)]
    energy = spins @ model.h[list(clique)] + np.einsum("si,ij,sj->s", spins, sub_j, spins)
    top = energy.max()
    all_plus = np.all(spins == 1.0, axis=1)
    q_plus = float(np.exp(energy[all_plus] - top).sum() / np.exp(energy - top).sum())
    s = contain * q_plus
    steps = {float(d): (math.ceil(math.log(d) / math.log1p(-s)) if s < 1 else 1) for d in deltas}
    return Prop4Prediction(k, s, 1.0 / s, steps)


@dataclass(frozen=True)
class Prop5Prediction:
    escape_probability_max: float  # eps_max over A = {sum_C x_i <= -2}
    expected_exit_lower_bound: float  # 1 / eps_max

    def hit_probability_bound(self, budget: int) -> float:
        """Upper bound on P(leave A, hence reach R_1, within `budget` steps)."""
        return min(1.0, budget * self.escape_probability_max)


def proposition5(model: IsingModel, clique: Sequence[int]) -> Prop5Prediction:
    """Exact worst-case one-step escape probability of the independent parallel sampler from A."""
    _check_isolated_clique(model, clique)
    space = model.space
    c = len(clique)
    spins = space.spins[:, list(clique)]
    in_a = spins.sum(axis=1) <= -2
    if not np.any(in_a):
        raise GmlmError(
            "the set {sum over the clique <= -2} is empty: the clique needs >= 2 vertices"
        )
    cond = single_site_conditionals(model.distribution)  # (N, S, 2); index 1 is spin +1
    plus = cond[list(clique)][:, in_a, 1].T  # (|A|, c)
    # Poisson-binomial law of the number m of clique spins that come out +1.
    law = np.zeros((plus.shape[0], c + 1))
    law[:, 0] = 1.0
    for j in range(c):
        p = plus[:, j : j + 1]
        law[:, 1:] = law[:, 1:] * (1 - p) + law[:, :-1] * p
        law[:, 0] *= 1 - p[:, 0]
    stay = law[:, : (c - 2) // 2 + 1].sum(axis=1)  # sum = 2m - c <= -2  <=>  m <= (c - 2) / 2
    eps = float(np.max(1.0 - stay))
    return Prop5Prediction(eps, 1.0 / eps if eps > 0 else float("inf"))


def _check_isolated_clique(model: IsingModel, clique: Sequence[int]) -> None:
    members = list(clique)
    others = [i for i in range(model.n_vars) if i not in members]
    if len(members) < 2:
        raise GmlmError("the clique needs at least 2 vertices")
    if others and np.any(model.J[np.ix_(members, others)] != 0):
        raise GmlmError(
            "propositions 4 and 5 need a clique with no couplings to the other vertices"
        )
