"""The per-example gradient covariances of `pl_statistics` (and the sandwich of `asymptotics`)
away from the truth, where the population gradient is not zero, against a brute-force
enumeration of every (example, mask) pair: each pair's conditional law over its block is summed
state by state, with none of the block reductions of gmlm.theory.space."""

from __future__ import annotations

import numpy as np
import pytest

from gmlm.errors import GmlmError
from gmlm.theory.asymptotics import asymptotics
from gmlm.theory.distributions import IsingModel
from gmlm.theory.estimators import (
    ExponentialFamily,
    MaskingScheme,
    downdate_root,
    pl_statistics,
)


def _random_model(n: int, seed: int, scale: float = 0.5) -> IsingModel:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.normal(0, scale, (n, n)), 1)
    return IsingModel(upper + upper.T, rng.normal(0, scale, n))


def _brute_force(
    family: ExponentialFamily, theta: np.ndarray, scheme: MaskingScheme, data: np.ndarray
) -> dict[str, np.ndarray | float]:
    """Loss, gradient, Hessian, Cov_pair and Cov_avg by enumerating every (x, K)."""
    states, features = family.space.states, family.features
    size, d = features.shape
    potential = features @ theta
    loss, grad, hessian = 0.0, np.zeros(d), np.zeros((d, d))
    second = np.zeros((d, d))  # sum over (x, K) of a g g^T
    g_avg = np.zeros((size, d))  # sum over K of p_K(K | x) g(x, K)
    for i, mask in enumerate(scheme.masks):
        weight = np.broadcast_to(scheme.weight(i), (size,))
        rest = [j for j in range(family.space.n_vars) if j not in mask]
        for x in range(size):
            block = [y for y in range(size) if np.all(states[y, rest] == states[x, rest])]
            q = np.exp(potential[block]) * (weight[block] if scheme.adaptive else 1.0)
            q /= q.sum()
            mean = q @ features[block]
            g = mean - features[x]  # the gradient of -log q(x)
            a = data[x] * weight[x]
            loss -= a * np.log(q[block.index(x)])
            grad += a * g
            centred = features[block] - mean
            hessian += a * (centred.T * q) @ centred
            second += a * np.outer(g, g)
            g_avg[x] += weight[x] * g
    mean_avg = data @ g_avg
    cov_avg = (g_avg - mean_avg).T @ ((g_avg - mean_avg) * data[:, None])
    return {
        "loss": loss,
        "grad": grad,
        "hessian": hessian,
        "cov_pair": second - np.outer(grad, grad),
        "cov_avg": cov_avg,
    }


def _schemes(space_size: int) -> list[MaskingScheme]:
    rng = np.random.default_rng(7)
    masks = ((0,), (1, 2), (0, 2))
    adaptive = rng.uniform(0.2, 1.0, (len(masks), space_size))
    return [
        MaskingScheme.k_pl(3, 1),
        MaskingScheme.k_pl(3, 2),
        MaskingScheme.weighted(3, masks, [0.5, 0.2, 0.3]),
        MaskingScheme.adaptive_masks(
            ExponentialFamily.ising(3).space, masks, adaptive / adaptive.sum(axis=0)
        ),
    ]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("which", range(4))
def test_gradient_covariances_match_enumeration_away_from_the_truth(which, sparse):
    family = ExponentialFamily.ising(3)
    scheme = _schemes(family.space.size)[which]
    theta = _random_model(3, 1).theta
    data = _random_model(3, 2).distribution.probs  # misspecified: the gradient is not zero
    if sparse:  # states the data never show, as in an empirical law of few samples
        data = np.where(np.arange(data.size) % 3 == 0, 0.0, data)
        data /= data.sum()
    stats = pl_statistics(family, theta, scheme, data, with_covariance=True, roots=True)
    want = _brute_force(family, theta, scheme, data)
    assert np.max(np.abs(want["grad"])) > 0.05  # far enough from a stationary point to matter
    np.testing.assert_allclose(stats.loss, want["loss"], rtol=1e-12)
    for name in ("grad", "hessian", "cov_pair", "cov_avg"):
        np.testing.assert_allclose(getattr(stats, name), want[name], rtol=0, atol=1e-12)
    # each root carries its own matrix: R^T R = M, with the gradient's outer product taken
    # off the pair root by the downdate
    for name in ("hessian", "cov_pair", "cov_avg"):
        root = getattr(stats, "cov_pair_root" if name == "cov_pair" else f"{name}_root")
        np.testing.assert_allclose(root.T @ root, want[name], rtol=0, atol=1e-12)


def test_the_misspecified_sandwich_is_h_inverse_cov_h_inverse():
    family = ExponentialFamily.ising(3)
    scheme = MaskingScheme.k_pl(3, 1)
    theta = _random_model(3, 3).theta
    data = _random_model(3, 4).distribution.probs
    asym = asymptotics(family, theta, scheme, data)
    want = _brute_force(family, theta, scheme, data)
    h_inv = np.linalg.inv(want["hessian"])  # type: ignore[arg-type]
    np.testing.assert_allclose(asym.cov_pair, want["cov_pair"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(asym.gamma, h_inv @ want["cov_pair"] @ h_inv, rtol=1e-9)
    np.testing.assert_allclose(asym.gamma_avg, h_inv @ want["cov_avg"] @ h_inv, rtol=1e-9)
    # off the truth, Lemma 2 (Cov_pair = H) no longer holds
    assert asym.lemma2_residual > 1e-3


def test_the_downdated_root_is_refused_when_the_gradient_explains_all_the_covariance():
    rng = np.random.default_rng(5)
    root = np.triu(rng.normal(size=(3, 3))) + 3 * np.eye(3)
    g = 0.3 * rng.normal(size=3)
    new = downdate_root(root, g)
    np.testing.assert_allclose(new.T @ new, root.T @ root - np.outer(g, g), atol=1e-12)
    assert np.allclose(new, np.triu(new))
    # R^T R - g g^T singular (g = R^T e1: u = e1, u.u = 1) or indefinite
    for scale in (1.0, 1.5):
        with pytest.raises(GmlmError, match="singular covariance"):
            downdate_root(root, scale * root.T @ np.eye(3)[0])
