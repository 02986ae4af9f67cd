import numpy as np
import pytest

from gmlm.errors import GmlmError
from gmlm.theory.asymptotics import asymptotics, inverse_fisher
from gmlm.theory.distributions import IsingModel, empirical
from gmlm.theory.estimators import (
    ExponentialFamily,
    MaskingScheme,
    fisher_information,
    fit,
    fit_samples,
    pl_statistics,
)


def random_model(n, seed, scale=0.4):
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.normal(0, scale, (n, n)), 1)
    return IsingModel(upper + upper.T, rng.normal(0, scale, n))


def test_one_spin_by_hand():
    h = 0.5
    model = IsingModel(np.zeros((1, 1)), np.array([h]))
    family = ExponentialFamily.ising(1)
    stats = pl_statistics(family, model.theta, MaskingScheme.k_pl(1, 1), model.distribution.probs)
    p_plus = np.exp(h) / (2 * np.cosh(h))
    entropy = -(p_plus * np.log(p_plus) + (1 - p_plus) * np.log(1 - p_plus))
    np.testing.assert_allclose(stats.loss, entropy)
    np.testing.assert_allclose(stats.grad, [0.0], atol=1e-15)
    np.testing.assert_allclose(stats.hessian, [[1 - np.tanh(h) ** 2]])


def test_two_spins_one_pl_hessian_by_hand():
    # Independent spins (J = 0); theta = (h1, h2, J12), features (x1, x2, 2 x1 x2).
    a, b = 0.3, -0.6
    model = IsingModel(np.zeros((2, 2)), np.array([a, b]))
    stats = pl_statistics(
        ExponentialFamily.ising(2), model.theta, MaskingScheme.k_pl(2, 1), model.distribution.probs
    )
    v1, v2 = 1 - np.tanh(a) ** 2, 1 - np.tanh(b) ** 2
    m1, m2 = np.tanh(a), np.tanh(b)
    # mask {1}: Cov(x1, 0, 2 x1 x2 | x2) = v1 [1, 0, 2x2][1, 0, 2x2]^T, averaged over x2.
    h1 = v1 * np.array([[1, 0, 2 * m2], [0, 0, 0], [2 * m2, 0, 4]])
    h2 = v2 * np.array([[0, 0, 0], [0, 1, 2 * m1], [0, 2 * m1, 4]])
    np.testing.assert_allclose(stats.hessian, 0.5 * (h1 + h2), atol=1e-14)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_k_equals_n_is_mle(n):
    model = random_model(n, n)
    family = ExponentialFamily.ising(n)
    probs = model.distribution.probs
    full = pl_statistics(family, model.theta, MaskingScheme.k_pl(n, n), probs, True)
    mle = pl_statistics(family, model.theta, MaskingScheme.mle(n), probs, True)
    np.testing.assert_allclose(full.hessian, fisher_information(family, model.theta), atol=1e-12)
    np.testing.assert_allclose(full.loss, -(probs @ model.distribution.log_p))
    np.testing.assert_allclose(full.hessian, mle.hessian)
    np.testing.assert_allclose(
        asymptotics(family, model.theta, MaskingScheme.mle(n)).gamma,
        inverse_fisher(family, model.theta),
        rtol=1e-9,
        atol=1e-9,
    )


def test_gradient_and_hessian_match_finite_differences():
    model = random_model(4, 1)
    family = ExponentialFamily.ising(4)
    data = random_model(4, 2).distribution.probs  # misspecified data: gradient is not zero
    scheme = MaskingScheme.k_pl(4, 2)
    theta = model.theta
    stats = pl_statistics(family, theta, scheme, data)
    eps = 1e-6
    for j in range(family.dim):
        e = np.zeros(family.dim)
        e[j] = eps
        up = pl_statistics(family, theta + e, scheme, data)
        down = pl_statistics(family, theta - e, scheme, data)
        np.testing.assert_allclose((up.loss - down.loss) / (2 * eps), stats.grad[j], atol=1e-7)
        np.testing.assert_allclose((up.grad - down.grad) / (2 * eps), stats.hessian[j], atol=1e-6)


def test_lemma2_holds_for_one_mask_per_example_only():
    model = random_model(4, 3)
    asym = asymptotics(ExponentialFamily.ising(4), model.theta, MaskingScheme.k_pl(4, 1))
    assert asym.lemma2_residual < 1e-12
    # averaging the masks inside the per-example loss makes its gradient covariance smaller
    assert np.linalg.norm(asym.hessian - asym.cov_avg) > 1e-3


def test_adaptive_with_constant_weights_equals_weighted():
    model = random_model(3, 4)
    family = ExponentialFamily.ising(3)
    fixed = MaskingScheme.k_pl(3, 2)
    adaptive = MaskingScheme.adaptive_masks(
        model.space, fixed.masks, np.repeat(fixed.weights[:, None], model.space.size, axis=1)
    )
    a = pl_statistics(family, model.theta, fixed, model.distribution.probs, True)
    b = pl_statistics(family, model.theta, adaptive, model.distribution.probs, True)
    np.testing.assert_allclose(a.hessian, b.hessian, atol=1e-14)
    np.testing.assert_allclose(a.cov_pair, b.cov_pair, atol=1e-14)
    np.testing.assert_allclose(a.loss, b.loss)


@pytest.mark.parametrize("masks_per_sample", ["one", "all"])
def test_fit_recovers_parameters_from_large_samples(masks_per_sample):
    model = random_model(3, 5)
    family = ExponentialFamily.ising(3)
    scheme = MaskingScheme.k_pl(3, 1)
    rng = np.random.default_rng(0)
    n = 200_000
    fit = fit_samples(family, scheme, model.distribution.sample(n, rng), masks_per_sample, rng)
    assert fit.converged and fit.grad_norm <= 1e-9
    asym = asymptotics(family, model.theta, scheme)
    gamma = asym.gamma if masks_per_sample == "one" else asym.gamma_avg
    # sqrt(n)(theta_hat - theta) ~ N(0, Gamma): a Mahalanobis distance under chi2(d=6);
    # P(chi2_6 > 40) < 1e-6.
    diff = fit.theta - model.theta
    assert n * diff @ np.linalg.solve(gamma, diff) < 40.0


@pytest.mark.parametrize("seed", [17, 56])
def test_fit_converges_when_the_loss_change_is_below_rounding(seed):
    # Samples on which Newton once stalled at max |gradient| ~ 2e-9 for all 100 iterations:
    # there the Armijo test compared loss changes of 1e-16, i.e. rounding, and refused the
    # full Newton step that brings the gradient to 1e-15 (figure 2 lost such fits as failed).
    model = IsingModel.clique(4, 4, 0.3, 0.0)
    family = ExponentialFamily.ising(4)
    data = empirical(family.space, model.distribution.sample(8000, np.random.default_rng(seed)))
    result = fit(family, MaskingScheme.mle(4), data)
    # Converged by the fit's own rule (Newton decrement at the loss's rounding floor), which
    # leaves max |gradient| at a few 1e-9 here: the loss is then within ~1e-17 of its minimum.
    assert result.converged and result.grad_norm <= 1e-8 and result.iterations < 20
    # The MLE of an exponential family matches the moments of the data.
    fitted = np.exp(family.log_probs(result.theta))
    np.testing.assert_allclose(fitted @ family.features, data @ family.features, atol=1e-8)


def test_fit_reports_non_convergence_when_no_minimiser_exists():
    family = ExponentialFamily.ising(2)
    samples = np.array([3, 3, 3, 3])  # always (+1, +1): the MLE is at infinity
    fit = fit_samples(family, MaskingScheme.k_pl(2, 1), samples, max_iter=30)
    assert not fit.converged


def test_bad_inputs():
    with pytest.raises(GmlmError, match="k must be"):
        MaskingScheme.k_pl(4, 0)
    with pytest.raises(GmlmError, match="k must be"):
        MaskingScheme.k_pl(4, 5)
    with pytest.raises(GmlmError, match="sum to 1"):
        MaskingScheme.weighted(3, [(0,), (1,)], [0.5, 0.6])
    with pytest.raises(GmlmError, match="mask"):
        MaskingScheme.weighted(3, [(0, 7)], [1.0])
    with pytest.raises(GmlmError, match="empty"):
        fit_samples(ExponentialFamily.ising(2), MaskingScheme.k_pl(2, 1), np.array([], dtype=int))
