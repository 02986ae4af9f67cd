"""Precision on strongly coupled models: gmlm against an independent 50-digit computation.

The models have J_ij ~ N(0, 3^2) at N = 3, so cond(I) is 1e6 .. 1e9 and the smallest eigenvalue
of a k-PL Hessian sits near 1e-12 of its largest. Summing uncentred moments in float64 leaves
errors of 1e-5 .. 1e-3 there (measured); the tests ask 1e-9.
"""

from __future__ import annotations

import json
import re

import mpmath as mp
import numpy as np
import pytest

from gmlm.cli.main import main
from gmlm.errors import GmlmError
from gmlm.theory import verify
from gmlm.theory.asymptotics import (
    Sandwich,
    asymptotics,
    generalised_eigenvalues,
    inverse_fisher_roots,
    psd_margin,
)
from gmlm.theory.chains import k_gibbs, poincare_constant
from gmlm.theory.distributions import IsingModel
from gmlm.theory.estimators import ExponentialFamily, MaskingScheme
from gmlm.theory.verify import CaseResult, VerifyReport, VerifySettings, run_verify
from tests.helpers.cli import exit_status
from tests.helpers.mpref import MpIsing, to_mp
from tests.helpers.mpref import generalised_eigenvalues as mp_generalised

ACCURACY = 1e-9


def strong_model(seed: int, n: int = 3, scale: float = 3.0) -> IsingModel:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.normal(0.0, scale, (n, n)), 1)
    return IsingModel(upper + upper.T, rng.normal(0.0, 0.3, n))


def as_floats(values: list[mp.mpf]) -> np.ndarray:
    return np.array([float(v) for v in values])


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_strongly_coupled_model_matches_50_digits(seed):
    model = strong_model(seed)
    n = model.n_vars
    family = ExponentialFamily.ising(n)
    ref = MpIsing(model.J, model.h)
    fisher = ref.fisher()
    eig = mp.eigsy(fisher, eigvals_only=True)
    assert 1e6 < float(max(eig) / min(eig)) < 1e10  # the regime the claim is about

    np.testing.assert_allclose(model.distribution.probs, as_floats(ref.p), rtol=1e-13)
    i_inv = inverse_fisher_roots(family, model.theta)
    # I = F^T F, compared in the metric of the exact I (scale-free)
    f = to_mp(i_inv.outer)
    assert np.max(np.abs(as_floats(mp_generalised(fisher, f.T * f)) - 1)) < ACCURACY

    gammas = [asymptotics(family, model.theta, MaskingScheme.k_pl(n, k)) for k in range(1, n + 1)]
    exact = [ref.gamma(k) for k in range(1, n + 1)]
    inverse = mp.inverse(fisher)
    for k in range(1, n + 1):
        ours, theirs = gammas[k - 1], exact[k - 1]
        dense_error = mp.mnorm(to_mp(ours.gamma) - theirs, "F") / mp.mnorm(theirs, "F")
        assert float(dense_error) < ACCURACY
        c = poincare_constant(k_gibbs(model.distribution, k)).poincare
        c_exact = ref.poincare(k)
        assert abs(c - float(c_exact)) / float(c_exact) < ACCURACY
        # Theorem 2's pair (C I^-1, Gamma^k) and Theorem 1's pair (Gamma^k, Gamma^k+1)
        np.testing.assert_allclose(
            generalised_eigenvalues(i_inv.scaled(c), ours.gamma_roots),
            as_floats(mp_generalised(inverse * c_exact, theirs)),
            rtol=0,
            atol=ACCURACY,
        )
        if k < n:
            np.testing.assert_allclose(
                generalised_eigenvalues(ours.gamma_roots, gammas[k].gamma_roots),
                as_floats(mp_generalised(theirs, exact[k])),
                rtol=0,
                atol=ACCURACY,
            )


def test_sandwich_covariance_on_misspecified_data_matches_50_digits():
    model = strong_model(1)
    data = strong_model(7, scale=1.0).distribution.probs
    ref = MpIsing(model.J, model.h, data=data)
    family = ExponentialFamily.ising(3)
    ours = [asymptotics(family, model.theta, MaskingScheme.k_pl(3, k), data) for k in (1, 2)]
    exact = [ref.gamma(k) for k in (1, 2)]
    for a, b in zip(ours, exact, strict=True):
        error = mp.mnorm(to_mp(a.gamma) - b, "F") / mp.mnorm(b, "F")
        assert float(error) < ACCURACY
        assert a.lemma2_residual > 1e-2  # Lemma 2 needs realizability
    np.testing.assert_allclose(
        generalised_eigenvalues(ours[0].gamma_roots, ours[1].gamma_roots),
        as_floats(mp_generalised(exact[0], exact[1])),
        rtol=ACCURACY,
    )


def test_verify_has_no_false_failures_on_strongly_coupled_models():
    # J_ij ~ N(0, 1.5^2), N = 3..5: cond(I) up to ~1e10. Summing uncentred moments reported
    # margins of -3.3e-4 here.
    settings = VerifySettings(
        min_n=3, max_n=5, coupling_scales=(1.5,), field_scales=(0.3,), clique_couplings=()
    )
    report = run_verify(settings)
    assert max(r.fisher_condition for r in report.rows) > 1e9
    assert report.passed
    for claim in report.claims.values():
        assert abs(claim.worst) < 1e-9 or claim.kind == "margin"


def test_verify_refuses_models_float64_cannot_resolve():
    # J_ij ~ N(0, 2^2) at N = 5 (cond(I) = 1.7e16): the root-based arithmetic is good to ~1e-8
    settings = VerifySettings(
        min_n=3, max_n=5, coupling_scales=(2.0,), field_scales=(0.3,), clique_couplings=()
    )
    with pytest.raises(GmlmError, match=r"N=5: cond\(I\) = 1\.7e\+16.*--couplings"):
        run_verify(settings)


def test_default_grid_includes_strong_couplings():
    assert max(VerifySettings().coupling_scales) >= 1.0


def test_margins_are_scale_free():
    # B exceeds A by 10% along a direction of variance 1e-6: a margin relative to the largest
    # eigenvalue would read -1e-7; the generalised margin reads -0.1 whatever the scale.
    identity = np.eye(2)
    a = Sandwich(identity, np.diag(np.sqrt([1.0, 1e-6])))
    b = Sandwich(identity, np.diag(np.sqrt([1.0, 1.1e-6])))
    np.testing.assert_allclose(a.matrix, np.diag([1.0, 1e-6]), rtol=1e-15)
    assert psd_margin(a, b) == pytest.approx(-0.1, abs=1e-12)
    assert abs(psd_margin(b, a)) < 1e-15  # b >= a, with equality along the first direction


def test_wrong_inputs_fail_the_claims():
    model = strong_model(0, n=3, scale=0.5)
    family = ExponentialFamily.ising(3)
    i_inv = inverse_fisher_roots(family, model.theta)
    gammas = [asymptotics(family, model.theta, MaskingScheme.k_pl(3, k)) for k in (1, 2, 3)]
    c3 = poincare_constant(k_gibbs(model.distribution, 3)).poincare
    assert psd_margin(i_inv.scaled(c3), gammas[2].gamma_roots) > -1e-12  # tight: C_N = 1
    assert psd_margin(i_inv.scaled(0.999 * c3), gammas[2].gamma_roots) < -1e-3
    assert psd_margin(gammas[1].gamma_roots, gammas[0].gamma_roots) < -1e-3  # k's swapped
    other = strong_model(5, n=3, scale=0.5).distribution.probs
    assert asymptotics(family, model.theta, MaskingScheme.k_pl(3, 1), other).lemma2_residual > 1e-3


def test_verify_fails_with_a_poincare_constant_too_small(monkeypatch):
    real = verify.poincare_constant

    def shrunk(chain):
        gap = real(chain)
        return type(gap)(gap.lambda2, gap.gap, 0.999 * gap.poincare, gap.method)

    monkeypatch.setattr(verify, "poincare_constant", shrunk)
    report = run_verify(VerifySettings(max_n=3))
    worst = report.claims
    assert not report.passed
    assert not worst["theorem2"].passed and worst["theorem2"].worst < -1e-4
    assert worst["lemma2"].passed and worst["theorem1"].passed


@pytest.mark.parametrize("nan_first", [True, False])
def test_a_nan_fails_the_claim(nan_first):
    rows = [
        CaseResult("m", 3, 1, values={"theorem1": float("nan")}),
        CaseResult("m", 3, 2, values={"theorem1": 0.5}),
    ]
    report = VerifyReport.build(VerifySettings(), rows if nan_first else rows[::-1], 0.0)
    claim = report.claims["theorem1"]
    assert not claim.passed and np.isnan(claim.worst) and claim.at == "m N=3 k=1"
    assert not report.passed


@pytest.mark.parametrize(
    ("tol", "problem"),
    [
        (-1e-6, "must be in (0, 0.0001] (the claims are exact, so the tolerance only absorbs"),
        (0.0, "must be in (0, 0.0001]"),
        (0.5, "must be in (0, 0.0001]"),
        (float("nan"), ": expected a finite number"),
    ],
)
def test_tolerance_must_be_positive_and_small(tol, problem, tmp_path, capsys):
    message = f"tol={tol:g}{'' if problem[0] == ':' else ' '}{problem}"
    with pytest.raises(GmlmError, match=re.escape(message)):
        run_verify(VerifySettings(max_n=2, tol=tol))
    argv = ["theory", "verify", "--max-n", "2", f"--tol={tol}", "--out", str(tmp_path)]
    assert exit_status(argv) == 2
    assert f"argument --tol: {tol}" in capsys.readouterr().err
    assert not (tmp_path / "verify.json").exists()


def test_cli_sets_the_grid(tmp_path, capsys):
    argv = ["theory", "verify", "--min-n", "3", "--max-n", "3", "--json", "--out", str(tmp_path)]
    argv += ["--couplings", "1.5", "--fields", "0.2", "--clique-couplings", "1.0"]
    assert main(argv) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert settings["coupling_scales"] == [1.5] and settings["field_scales"] == [0.2]
    assert settings["clique_couplings"] == [1.0]
    rows = json.loads((tmp_path / "verify.json").read_text())["rows"]
    assert {r["model"] for r in rows} == {"random(J~1.5,h~0.2)", "clique(|C|=2,J=1.0)"}
