"""The matrix-free 1-Gibbs operator, its spectral gap, and the time-bounded benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gmlm.cli.main import main
from gmlm.errors import GmlmError
from gmlm.memory import format_bytes
from gmlm.theory import bench, single_site
from gmlm.theory.bench import (
    PoincareRun,
    ProgressLines,
    estimate_line,
    poincare_bytes,
    poincare_run,
    poincare_sweep,
)
from gmlm.theory.chains import k_gibbs, poincare_constant
from gmlm.theory.distributions import IsingModel
from gmlm.theory.estimators import MaskingScheme
from gmlm.theory.settings import BenchSettings, PoincareSettings
from gmlm.theory.single_site import DeadlineExceeded, SingleSiteGibbs, single_site_gap
from gmlm.theory.space import StateSpace
from tests.helpers.cli import exit_status


def dense_symmetrised(model: IsingModel) -> np.ndarray:
    p = model.distribution.probs
    root = np.sqrt(p)
    return root[:, None] * k_gibbs(model.distribution, 1).matrix() / root[None, :]


@pytest.mark.parametrize("tile", [1 << 16, 1 << 8, 1 << 9, 16])
@pytest.mark.parametrize("n", [1, 5, 11])
def test_product_matches_the_dense_matrix(monkeypatch, tile, n):
    # Small tiles exercise both passes (row and column tiles) and the transposed fine variables
    monkeypatch.setattr(single_site, "TILE", tile)
    model = IsingModel.random(n, 0.5, n)
    sym = dense_symmetrised(model)
    v = np.random.default_rng(0).normal(size=(2**n, 3))
    for threads in (1, 2):
        op = SingleSiteGibbs(model.distribution.log_p, threads=threads)
        try:
            out = np.stack([op.apply(v[:, j]) for j in range(3)], axis=1)
        finally:
            op.close()
        np.testing.assert_allclose(out, sym @ v, rtol=0, atol=1e-14)
        if threads == 1:
            single = out
        else:  # every element is computed by the same operations whatever the thread count
            np.testing.assert_array_equal(out, single)


@pytest.mark.parametrize(("n", "scale"), [(9, 0.2), (10, 0.5), (10, 1.0)])
def test_gap_matches_dense(n, scale):
    model = IsingModel.random(n, scale, 1)
    chain = k_gibbs(model.distribution, 1)
    dense = poincare_constant(chain, "dense")
    fast = poincare_constant(chain, "single-site", threads=1)
    assert fast.method == "single-site"
    np.testing.assert_allclose(fast.poincare, dense.poincare, rtol=1e-10)


@pytest.mark.parametrize(("scale", "gap"), [(1.5, 6.4e-13), (2.0, 1.1e-16)])
def test_small_gap_is_refined_through_the_dirichlet_form(scale, gap):
    # J std 1.5 and 2 at N = 8: the Lanczos value alone is off by 5e-4 and 1e-2 relative
    model = IsingModel.random(8, scale, 0)
    result = single_site_gap(model.distribution.log_p, threads=1)
    dense = poincare_constant(k_gibbs(model.distribution, 1), "dense")
    assert result.refined and result.gap == pytest.approx(gap, rel=0.1)
    assert abs(1 - result.lanczos_lambda2 - dense.gap) > 1e-4 * dense.gap
    # A gap of 1e-16 agrees with the dense solver to ~1e-9 relative (the dense side's own
    # rounding differs with the BLAS thread count and CPU): far inside the 1e-2 of Lanczos alone.
    np.testing.assert_allclose(result.gap, dense.gap, rtol=1e-8)


def test_auto_picks_the_single_site_operator_beyond_the_dense_limit():
    model = IsingModel.random(12, 0.2, 0)
    assert poincare_constant(k_gibbs(model.distribution, 1), threads=1).method == "single-site"
    assert poincare_constant(k_gibbs(model.distribution, 2)).method == "lanczos"


def test_log_potential_matches_the_definition():
    model = IsingModel.random(7, 0.7, 3)
    x = StateSpace(7).spins
    expected = x @ model.h + np.einsum("si,ij,sj->s", x, model.J, x)
    np.testing.assert_allclose(model.log_potential(), expected, rtol=0, atol=1e-13)


def test_bad_inputs():
    model = IsingModel.random(4, 0.2, 0)
    with pytest.raises(GmlmError, match="1-Gibbs on binary variables only"):
        poincare_constant(k_gibbs(model.distribution, 2), "single-site")
    with pytest.raises(GmlmError, match="2\\^N states"):
        SingleSiteGibbs(np.zeros(6))
    with pytest.raises(GmlmError, match="threads must be >= 1"):
        SingleSiteGibbs(np.full(8, -np.log(8)), threads=0)
    with pytest.raises(GmlmError, match="N <= 24"):
        IsingModel.random(25, 0.2, 0).distribution  # noqa: B018
    with pytest.raises(GmlmError, match="unknown method"):
        poincare_constant(k_gibbs(model.distribution, 1), "arpack")


def test_deadline_stops_the_iteration():
    model = IsingModel.random(12, 0.2, 0)
    with pytest.raises(DeadlineExceeded, match="time limit"):
        single_site_gap(model.distribution.log_p, threads=1, deadline=time.perf_counter())
    chain = k_gibbs(model.distribution, 2)
    with pytest.raises(DeadlineExceeded, match="time limit"):
        poincare_constant(chain, "lanczos", deadline=time.perf_counter())


def fake_run(seconds_at_12: float, growth: float, calls: list[int]):
    def run(settings, deadline=None):
        calls.append(settings.n)
        seconds = seconds_at_12 * growth ** ((settings.n - 12) / 2)
        return PoincareRun(
            settings.n, 1, 2**settings.n, 0.2, 0, "fake", 1, 1.0, 1.0, seconds, 0.0, 0.0
        )

    return run


def test_sweep_stops_before_a_run_predicted_to_exceed_the_limit(monkeypatch):
    # Times 1, 5, 25, 125 s at N = 12..18 and a 60 s limit: N = 18 is predicted at 125 s and
    # never started (growing only while the last run was within the limit would start it).
    calls: list[int] = []
    monkeypatch.setattr(bench, "poincare_run", fake_run(1.0, 5.0, calls))
    sweep = poincare_sweep(BenchSettings(limit=60.0))
    assert calls == [12, 14, 16]
    assert "N=18 not run: predicted 125 s" in sweep.stopped
    assert sweep.largest_n_within(60.0) == 16


def test_sweep_uses_the_measured_growth(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(bench, "poincare_run", fake_run(1.0, 2.0, calls))
    sweep = poincare_sweep(BenchSettings(limit=60.0, max_n=22))
    assert calls == [12, 14, 16, 18, 20, 22] and sweep.stopped == "reached max N = 22"


def test_sweep_stops_at_the_deadline(monkeypatch):
    def run(settings, deadline=None):
        if settings.n > 12:
            raise DeadlineExceeded("the time limit was reached")
        return PoincareRun(12, 1, 4096, 0.2, 0, "fake", 1, 1.0, 1.0, 0.01, 0.0, 0.0)

    monkeypatch.setattr(bench, "poincare_run", run)
    sweep = poincare_sweep(BenchSettings(limit=1.0))
    assert [r.n for r in sweep.runs] == [12]
    assert "N=14 stopped at twice the limit" in sweep.stopped


def test_poincare_command_prints_time_and_memory(capsys):
    assert main(["theory", "poincare", "--n", "12", "--threads", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["method"] == "single-site" and row["threads"] == 1 and row["states"] == 4096
    assert row["seconds"] > 0 and row["peak_rss_mib"] >= row["start_rss_mib"] > 10
    assert row["environment"]["threads"] >= 1
    gap = single_site_gap(IsingModel.random(12, 0.2, 0).distribution.log_p, threads=1).gap
    assert row["poincare"] == 1 / gap
    assert main(["theory", "poincare", "--n", "10", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "N=10" in out and "peak RSS" in out and " s (dense, 1 thread)" in out


def test_bench_rejects_bad_settings(capsys):
    assert exit_status(["theory", "bench", "--limit", "0"]) == 2
    assert "argument --limit: 0 must be in (0, 604800] (seconds)" in capsys.readouterr().err
    assert exit_status(["theory", "bench", "--max-n", "26"]) == 2
    assert "26 must be between 2 and 24 (the 1-Gibbs operator's limit)" in capsys.readouterr().err
    with pytest.raises(GmlmError, match=r"^limit=nan: expected a finite number"):
        BenchSettings(limit=float("nan")).check()
    with pytest.raises(GmlmError, match=r"^need min N <= max N, got 20\.\.14$"):
        BenchSettings(min_n=20, max_n=14).check()


def test_theory_command_line_does_not_import_numerical_libraries():
    code = (
        "import argparse, sys; import gmlm.cli.theory as t; "
        "t.add_parser(argparse.ArgumentParser().add_subparsers()); "
        "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'matplotlib') if m in sys.modules))"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"


def test_k_gibbs_scheme_detection_needs_uniform_single_sites():
    model = IsingModel.random(3, 0.2, 0)
    weighted = MaskingScheme.weighted(3, [(0,), (1,), (2,)], [0.2, 0.3, 0.5])
    chain = type(k_gibbs(model.distribution, 1))(model.distribution, weighted)
    with pytest.raises(GmlmError, match="1-Gibbs on binary variables only"):
        poincare_constant(chain, "single-site")


@pytest.mark.slow
def test_bench_end_to_end(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["theory", "bench", "--limit", "2", "--max-n", "16", "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    data = json.loads(lines[-1])
    assert data["verify_passed"] and set(data["figures_seconds"]) == {
        "figure1",
        "figure2",
        "figure3",
    }
    saved = json.loads((out / "bench.json").read_text())
    runs = saved["poincare"]
    assert [r["n"] for r in runs] == list(range(12, 12 + 2 * len(runs), 2)) and runs
    assert all(r["peak_rss_mib"] > 0 and r["method"] == "single-site" for r in runs)
    assert saved["poincare_stopped"] and saved["environment"]["cpu"]
    assert any("Poincare, 1-Gibbs, N=12" in line and "peak RSS" in line for line in lines)
    for name in ("figure1", "figure2", "figure3"):
        assert (out / f"{name}.png").stat().st_size > 0


def test_poincare_says_what_it_will_do_then_how_it_goes():
    lines: list[str] = []
    run = poincare_run(PoincareSettings(n=12, k=3, threads=1), say=lines.append)
    assert lines[0] == (
        "estimate: 3-Gibbs, N=12, lanczos: 220 block(s) over 4,096 states per operator "
        "application (9e+05 block-state updates), at least 20 applications; memory about "
        f"{format_bytes(poincare_bytes(12, 3, 'lanczos'))}"
    )
    assert lines[1].startswith("  first operator application: ")
    assert " s; at least 20 applications in all: " in lines[1]
    assert run.method == "lanczos"
    # The case of the issue, hours of work: the line says so before any of it starts.
    assert estimate_line(20, 10, "lanczos", poincare_bytes(20, 10, "lanczos")).startswith(
        "estimate: 10-Gibbs, N=20, lanczos: 184,756 block(s) over 1,048,576 states per "
        "operator application (1.9e+11 block-state updates), at least 20 applications"
    )


def test_progress_lines_come_every_few_seconds_with_the_blocks_done():
    now = [0.0]
    lines: list[str] = []
    progress = ProgressLines(lines.append, least=20, every=10.0, clock=lambda: now[0])
    for block in range(1, 101):  # the first application: 100 blocks of 0.5 s each
        now[0] += 0.5
        progress(0, block, 100)
    progress(1, 0, 0)
    now[0] += 4.0
    progress(1, 8, 100)  # within 10 s of the last line: quiet
    now[0] += 7.0
    progress(1, 30, 100)
    assert lines == [
        "  0 operator applications, 20 of 100 blocks of the next (about 50.0 s); 10.0 s so far",
        "  0 operator applications, 40 of 100 blocks of the next (about 50.0 s); 20.0 s so far",
        "  0 operator applications, 60 of 100 blocks of the next (about 50.0 s); 30.0 s so far",
        "  0 operator applications, 80 of 100 blocks of the next (about 50.0 s); 40.0 s so far",
        "  0 operator applications, 100 of 100 blocks of the next (about 50.0 s); 50.0 s so far",
        "  first operator application: 50.0 s; at least 20 applications in all: 17 min or more",
        "  1 operator applications, 30 of 100 blocks of the next (about 36.7 s); 61.0 s so far",
    ]


def test_poincare_beyond_the_free_memory_is_refused_before_it_starts(monkeypatch, capsys):
    monkeypatch.setattr("gmlm.memory.available_bytes", lambda device="cpu": 2**30)
    monkeypatch.setattr(bench, "IsingModel", None)  # nothing is built
    assert main(["theory", "poincare", "--n", "24", "--threads", "1"]) == 2
    need = format_bytes(poincare_bytes(24, 1, "single-site"))
    assert capsys.readouterr().err == (
        "gmlm: error: the exact Poincare constant of 1-Gibbs over 2^24 states (single-site) "
        f"needs about {need} of memory, but 1.0 GiB is available; lower --n (each spin "
        "doubles the states)\n"
    )


def test_the_poincare_command_refuses_k_beyond_n(capsys):
    assert exit_status(["theory", "poincare", "--n", "4", "--k", "5"]) == 2
    assert capsys.readouterr().err == "gmlm: error: k=5 must lie in 1..N = 1..4\n"
