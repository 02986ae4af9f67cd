import numpy as np
import pytest
from scipy.stats import chi2

from gmlm.errors import GmlmError
from gmlm.theory.chains import BlockDynamics, independent_parallel_matrix, k_gibbs
from gmlm.theory.distributions import IsingModel
from gmlm.theory.estimators import MaskingScheme
from gmlm.theory.samplers import (
    block_dynamics_step,
    hitting_times,
    independent_parallel_step,
    k_gibbs_step,
    run_chains,
)
from gmlm.theory.verify import adaptive_scheme

DRAWS = 100_000
# Each comparison is a chi-square test at level 1e-6 over the cells with positive expected
# count: a correct sampler fails it with probability 1e-6 per test (seeded, so reproducible).
LEVEL = 1e-6


def dist4():
    return IsingModel.clique(4, 3, 0.4, 0.2).distribution


def assert_matches_row(step, dist, start, row, seed):
    rng = np.random.default_rng(seed)
    x = np.tile(dist.space.states[start].astype(np.int64), (DRAWS, 1))
    counts = np.bincount(dist.space.index(step(x, rng)), minlength=dist.space.size)
    expected = row * DRAWS
    assert counts[expected == 0].sum() == 0  # impossible moves never happen
    keep = expected > 0
    stat = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
    assert stat < chi2.ppf(1 - LEVEL, keep.sum() - 1), stat


@pytest.mark.parametrize("k", [1, 2, 4])
def test_k_gibbs_step_matches_exact_transition(k):
    dist = dist4()
    P = k_gibbs(dist, k).matrix()
    for start in (0, 6, 15):
        assert_matches_row(k_gibbs_step(dist, k), dist, start, P[start], seed=start + 10 * k)


def test_independent_parallel_step_matches_exact_transition():
    dist = dist4()
    P = independent_parallel_matrix(dist)
    for start in (0, 9):
        assert_matches_row(independent_parallel_step(dist), dist, start, P[start], seed=start)


def test_block_dynamics_steps_match_exact_transition():
    dist = dist4()
    weighted = MaskingScheme.weighted(4, [(0,), (1, 2), (0, 3)], [0.2, 0.5, 0.3])
    adaptive = adaptive_scheme(dist.space, 2, np.random.default_rng(3))
    for scheme in (weighted, adaptive):
        P = BlockDynamics(dist, scheme).matrix()
        for start in (2, 13):
            assert_matches_row(block_dynamics_step(dist, scheme), dist, start, P[start], start)


def test_many_steps_match_matrix_power():
    dist = dist4()
    rng = np.random.default_rng(0)
    x = run_chains(k_gibbs_step(dist, 2), np.zeros((DRAWS, 4), dtype=np.int64), 30, rng)
    row = np.linalg.matrix_power(k_gibbs(dist, 2).matrix(), 30)[0]
    counts = np.bincount(dist.space.index(x), minlength=16)
    stat = float(np.sum((counts - row * DRAWS) ** 2 / (row * DRAWS)))
    assert stat < chi2.ppf(1 - LEVEL, 15)


def test_hitting_times_semantics():
    dist = dist4()
    target = np.zeros(16, dtype=bool)
    target[15] = True
    x0 = np.array([[1, 1, 1, 1], [0, 0, 0, 0]], dtype=np.int64)
    # 4-Gibbs resamples everything at once: geometric hitting time with success p(15)
    times = hitting_times(dist, k_gibbs_step(dist, 4), x0, target, 10_000, np.random.default_rng(0))
    assert times.steps[0] == 0 and times.steps[1] >= 1
    none = hitting_times(
        dist, k_gibbs_step(dist, 1), x0[1:], np.zeros(16, bool), 5, np.random.default_rng(0)
    )
    assert none.steps[0] == -1 and none.capped()[0] == 5 and not none.hit[0]


def test_hitting_time_mean_is_geometric():
    dist = dist4()
    target = np.zeros(16, dtype=bool)
    target[15] = True
    x0 = np.zeros((20_000, 4), dtype=np.int64)
    times = hitting_times(
        dist, k_gibbs_step(dist, 4), x0, target, 100_000, np.random.default_rng(1)
    )
    p = dist.probs[15]
    mean, sd = 1 / p, np.sqrt(1 - p) / p
    assert abs(times.steps.mean() - mean) < 6 * sd / np.sqrt(len(x0))  # 6 sigma: ~2e-9 fail rate


def test_bad_sampler_inputs():
    dist = dist4()
    with pytest.raises(GmlmError, match="k must be"):
        k_gibbs_step(dist, 0)
    with pytest.raises(GmlmError, match="target"):
        hitting_times(
            dist,
            k_gibbs_step(dist, 1),
            np.zeros((1, 4), np.int64),
            np.zeros(3, bool),
            5,
            np.random.default_rng(0),
        )
