import itertools

import numpy as np
import pytest

from gmlm.errors import GmlmError
from gmlm.theory.chains import (
    BlockDynamics,
    independent_parallel_matrix,
    independent_parallel_report,
    k_gibbs,
    poincare_constant,
    stationary_distribution,
)
from gmlm.theory.distributions import Distribution, IsingModel
from gmlm.theory.estimators import MaskingScheme
from gmlm.theory.space import StateSpace
from gmlm.theory.verify import adaptive_scheme


def coupled(n=4, seed=0):
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.normal(0, 0.5, (n, n)), 1)
    return IsingModel(upper + upper.T, rng.normal(0, 0.3, n)).distribution


def schemes(dist):
    n = dist.space.n_vars
    out = [MaskingScheme.k_pl(n, k) for k in range(1, n + 1)]
    out.append(MaskingScheme.weighted(n, [(0,), (1, 2), (0, 3), (1, 2, 3)], [0.1, 0.2, 0.3, 0.4]))
    out.append(adaptive_scheme(dist.space, 2, np.random.default_rng(1)))
    return out


def test_every_block_dynamics_is_stochastic_reversible_and_stationary():
    dist = coupled()
    p = dist.probs
    for scheme in schemes(dist):
        P = BlockDynamics(dist, scheme).matrix()
        assert np.all(P >= 0)
        np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-13)
        flow = p[:, None] * P
        np.testing.assert_allclose(flow, flow.T, atol=1e-15)  # detailed balance
        np.testing.assert_allclose(p @ P, p, atol=1e-14)  # stationarity


def test_transition_only_changes_the_mask():
    dist = coupled(3)
    P = BlockDynamics(dist, MaskingScheme.weighted(3, [(1,)], [1.0])).matrix()
    states = dist.space.states
    moved = P > 0
    for x, y in zip(*np.nonzero(moved), strict=True):
        assert states[x][0] == states[y][0] and states[x][2] == states[y][2]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_product_measure_gap_is_k_over_n(k):
    # For independent spins, k-Gibbs has spectral gap k / N exactly, so C = N / k.
    n = 5
    model = IsingModel(np.zeros((n, n)), np.linspace(-0.5, 0.8, n))
    gap = poincare_constant(k_gibbs(model.distribution, k))
    np.testing.assert_allclose(gap.poincare, n / k, rtol=1e-10)


def test_dense_and_lanczos_agree_and_larger_k_mixes_faster():
    dist = coupled(6, 3)
    previous = np.inf
    for k in range(1, 7):
        dense = poincare_constant(k_gibbs(dist, k), "dense").poincare
        lanczos = poincare_constant(k_gibbs(dist, k), "lanczos").poincare
        np.testing.assert_allclose(dense, lanczos, rtol=1e-8)
        assert dense <= previous / 1.0 + 1e-9 and dense >= 1.0 - 1e-12
        previous = dense
    np.testing.assert_allclose(previous, 1.0, rtol=1e-12)  # k = N samples exactly: C = 1


def test_independent_parallel_sampler_by_hand_and_its_bias():
    # Independent spins: the parallel sampler samples p exactly in one step.
    model = IsingModel(np.zeros((3, 3)), np.array([0.2, -0.4, 0.9]))
    P = independent_parallel_matrix(model.distribution)
    np.testing.assert_allclose(P, np.tile(model.distribution.probs, (8, 1)), atol=1e-15)
    # Coupled spins: a product transition cannot keep p stationary.
    dist = coupled(4, 5)
    P = independent_parallel_matrix(dist)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-13)
    report = independent_parallel_report(dist)
    np.testing.assert_allclose(report.stationary @ P, report.stationary, atol=1e-14)
    assert report.tv_to_p > 1e-3


def test_two_spin_parallel_matrix_by_hand():
    j = 0.5
    dist = IsingModel(np.array([[0, j], [j, 0]]), np.zeros(2)).distribution
    P = independent_parallel_matrix(dist)
    agree = np.exp(2 * j) / (np.exp(2 * j) + np.exp(-2 * j))  # p(x_i = x_j | x_j)
    # from (-1, -1) each spin independently copies the other's old value with prob `agree`
    expected = [agree * agree, agree * (1 - agree), (1 - agree) * agree, (1 - agree) ** 2]
    np.testing.assert_allclose(P[0], expected)


def test_stationary_distribution_of_metastable_chain():
    eps = 1e-14
    P = np.array([[1 - eps, eps], [2 * eps, 1 - 2 * eps]])
    np.testing.assert_allclose(stationary_distribution(P), [2 / 3, 1 / 3], rtol=1e-12)
    with pytest.raises(GmlmError, match="reducible"):
        stationary_distribution(np.eye(2))


def test_reducible_scheme_has_infinite_constant_and_bad_inputs():
    dist = coupled(3)
    gap = poincare_constant(BlockDynamics(dist, MaskingScheme.weighted(3, [(0,)], [1.0])))
    assert gap.poincare == np.inf
    with pytest.raises(GmlmError, match="p\\(x\\) > 0"):
        space = StateSpace(2)
        poincare_constant(k_gibbs(Distribution.from_probs(space, np.array([0.5, 0.5, 0, 0])), 1))
    with pytest.raises(GmlmError, match="k must be"):
        k_gibbs(dist, 4)


def test_matrix_free_apply_matches_matrix():
    dist = coupled(4, 7)
    for scheme in schemes(dist):
        chain = BlockDynamics(dist, scheme)
        f = np.random.default_rng(0).normal(size=(16, 3))
        np.testing.assert_allclose(chain.apply(f), chain.matrix() @ f, atol=1e-13)


def test_all_size_k_subsets_listed_once():
    scheme = MaskingScheme.k_pl(5, 2)
    assert set(scheme.masks) == set(itertools.combinations(range(5), 2))
