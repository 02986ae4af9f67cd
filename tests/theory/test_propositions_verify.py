import json

import numpy as np
import pytest

from gmlm.cli.main import main
from gmlm.errors import GmlmError
from gmlm.theory.chains import independent_parallel_matrix, k_gibbs
from gmlm.theory.distributions import IsingModel, clique_region
from gmlm.theory.propositions import proposition4, proposition5
from gmlm.theory.verify import VerifySettings, run_verify
from tests.helpers.cli import exit_status


@pytest.mark.parametrize("k", [3, 4, 6])
def test_proposition4_step_probability_is_a_lower_bound(k):
    model = IsingModel.clique(6, 3, 1.0, 0.5)
    pred = proposition4(model, [0, 1, 2], k)
    P = k_gibbs(model.distribution, k).matrix()
    into_r1 = P[:, clique_region(model.space, [0, 1, 2], +1)].sum(axis=1)
    assert into_r1.min() >= pred.step_probability - 1e-12
    # From R_-1 with strong coupling, only moves that take the whole clique reach R_1.
    r_minus = clique_region(model.space, [0, 1, 2], -1)
    assert into_r1[r_minus].min() <= pred.step_probability * 1.05
    assert pred.steps_for_delta[0.1] >= np.log(0.1) / np.log(1 - pred.step_probability)


def test_proposition4_needs_k_at_least_clique():
    model = IsingModel.clique(5, 3, 1.0, 0.5)
    assert proposition4(model, [0, 1, 2], 2) is None
    with pytest.raises(GmlmError, match="no couplings"):
        J = model.J.copy()
        J[0, 4] = J[4, 0] = 0.1
        proposition4(IsingModel(J, model.h), [0, 1, 2], 3)


def test_proposition5_matches_exact_escape_probability():
    model = IsingModel.clique(5, 4, 2.0, 3.0)
    pred = proposition5(model, [0, 1, 2, 3])
    P = independent_parallel_matrix(model.distribution)
    in_a = model.space.spins[:, :4].sum(axis=1) <= -2
    escape = P[np.ix_(in_a, ~in_a)].sum(axis=1)
    np.testing.assert_allclose(pred.escape_probability_max, escape.max(), rtol=1e-10)


def test_verify_grid_passes_and_reports_every_claim():
    report = run_verify(VerifySettings(max_n=4))
    worst = report.claims
    assert report.passed
    assert set(worst) == {
        "lemma2",
        "k=N is MLE",
        "theorem1",
        "theorem2",
        "theorem3",
        "lemma2 adaptive",
        "averaging",
    }
    assert worst["lemma2"].worst < 1e-10


def test_cli_verify_json(tmp_path, capsys):
    assert main(["theory", "verify", "--max-n", "3", "--json", "--out", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and (tmp_path / "verify.json").exists()


def test_cli_clean_errors(tmp_path, capsys):
    assert exit_status(["theory", "verify", "--max-n", "30", "--out", str(tmp_path)]) == 2
    assert "exact-enumeration limit" in capsys.readouterr().err
    assert exit_status(["theory", "figure3", "--ks", "0,2", "--out", str(tmp_path)]) == 2
    assert "0 must be between 1 and 24 (a block size k lies in 1..N)" in capsys.readouterr().err
    assert exit_status(["theory", "figure3", "--ks", "2,11", "--out", str(tmp_path)]) == 2
    assert "every k must lie in 1..N = 1..10" in capsys.readouterr().err
    assert exit_status(["theory", "figure1", "--reps", "0", "--out", str(tmp_path)]) == 2
