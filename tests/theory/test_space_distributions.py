import numpy as np
import pytest

from gmlm.errors import GmlmError
from gmlm.theory.distributions import Distribution, IsingModel, clique_region, empirical
from gmlm.theory.space import StateSpace, block_log_softmax


def test_blocks_round_trip_and_grouping():
    space = StateSpace(4, 3)
    values = np.arange(space.size * 2, dtype=float).reshape(space.size, 2)
    for mask in [(0,), (1, 3), (0, 1, 2, 3)]:
        blocks = space.to_blocks(values, mask)
        assert blocks.shape == (space.size // 3 ** len(mask), 3 ** len(mask), 2)
        np.testing.assert_array_equal(space.from_blocks(blocks, mask), values)
        # every row of a block agrees outside the mask
        digits = space.to_blocks(space.states, mask)
        rest = [i for i in range(4) if i not in mask]
        assert np.all(digits[:, :, rest] == digits[:, :1, rest])


def test_index_matches_enumeration():
    space = StateSpace(5, 2)
    np.testing.assert_array_equal(space.index(space.states), np.arange(space.size))


def test_state_space_limit_names_the_limit():
    with pytest.raises(GmlmError, match="N <= 24"):
        StateSpace(30, 2)


def test_block_log_softmax_handles_empty_rows():
    out = block_log_softmax(np.array([[0.0, np.log(3.0)], [-np.inf, -np.inf]]))
    np.testing.assert_allclose(np.exp(out[0]), [0.25, 0.75])
    assert np.all(out[1] == -np.inf)


def test_ising_one_spin_by_hand():
    h = 0.7
    p = IsingModel(np.zeros((1, 1)), np.array([h])).distribution.probs
    np.testing.assert_allclose(p, [np.exp(-h), np.exp(h)] / (np.exp(h) + np.exp(-h)))


def test_ising_two_spins_by_hand_ordered_pairs():
    h1, h2, j = 0.3, -0.2, 0.4
    model = IsingModel(np.array([[0, j], [j, 0]]), np.array([h1, h2]))
    weights = {}
    for x1 in (-1, 1):
        for x2 in (-1, 1):
            weights[(x1, x2)] = np.exp(h1 * x1 + h2 * x2 + 2 * j * x1 * x2)  # J_12 and J_21
    z = sum(weights.values())
    expected = [weights[(-1, -1)], weights[(-1, 1)], weights[(1, -1)], weights[(1, 1)]]
    np.testing.assert_allclose(model.distribution.probs, np.array(expected) / z)


def test_theta_round_trip_and_clique():
    model = IsingModel.clique(5, 3, 0.4, 0.1)
    assert model.J[0, 1] == 0.4 and model.J[0, 3] == 0 and model.J[4, 4] == 0
    again = IsingModel.from_theta(5, model.theta)
    np.testing.assert_array_equal(again.J, model.J)
    r1 = clique_region(model.space, [0, 1, 2], +1)
    assert r1.sum() == 2**2


@pytest.mark.parametrize(
    "J, h, match",
    [
        (np.array([[0, 1.0], [0.5, 0]]), np.zeros(2), "symmetric"),
        (np.array([[0, np.nan], [np.nan, 0]]), np.zeros(2), "finite"),
        (np.array([[1.0, 0], [0, 0]]), np.zeros(2), "diagonal"),
        (np.zeros((3, 3)), np.zeros(2), "shape"),
        (np.zeros((2, 2)), np.array([np.inf, 0]), "finite"),
    ],
)
def test_ising_bad_input(J, h, match):
    with pytest.raises(GmlmError, match=match):
        IsingModel(J, h)


def test_sampling_matches_probabilities():
    dist = IsingModel.clique(3, 3, 0.2, 0.1).distribution
    freq = empirical(dist.space, dist.sample(200_000, np.random.default_rng(0)))
    # 200k draws: per-state std <= sqrt(0.25 / 200k) ~ 0.0011; 6 std is a 1e-8 failure rate.
    assert np.max(np.abs(freq - dist.probs)) < 0.0068


def test_empty_samples_and_bad_potentials():
    space = StateSpace(2)
    with pytest.raises(GmlmError, match="empty"):
        empirical(space, np.array([], dtype=int))
    with pytest.raises(GmlmError, match="entries"):
        Distribution.from_log_potential(space, np.zeros(3))
    with pytest.raises(GmlmError, match="zero probability"):
        Distribution.from_log_potential(space, np.full(4, -np.inf))
