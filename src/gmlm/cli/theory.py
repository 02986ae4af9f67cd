"""`gmlm theory ...`: exact checks of the paper's theory and its Figures 1-3."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from gmlm.errors import GmlmError
from gmlm.io import atomic_write_json, make_dirs
from gmlm.theory.chains import BlockDynamics, poincare_constant
from gmlm.theory.distributions import IsingModel
from gmlm.theory.estimators import MaskingScheme
from gmlm.theory.figures import (
    EstimationSettings,
    FigureResult,
    HittingSettings,
    estimation_figure,
    hitting_figure,
    summary_lines,
    write_figure,
)
from gmlm.theory.verify import VerifySettings, run_verify

DEFAULT_OUT = Path("runs/theory")


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "theory",
        help="exact checks of the theory and the paper's Ising figures",
        description="Exact computations by enumeration over {-1,+1}^N (Ising convention: "
        "p(x) ∝ exp(h.x + sum over ordered pairs i != j of J_ij x_i x_j)).",
    )
    tsub = parser.add_subparsers(dest="theory_command", metavar="SUBCOMMAND")
    tsub.required = True

    p = tsub.add_parser(
        "verify",
        help="check Lemma 2 and Theorems 1-3 on a seeded grid of models",
        description="Exit status 1 if any claim fails beyond the tolerance.",
    )
    p.add_argument("--min-n", type=int, default=2, help="smallest N in the grid (default 2)")
    p.add_argument("--max-n", type=int, default=8, help="largest N in the grid (default 8, max 14)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random models (default 0)")
    p.add_argument(
        "--tol",
        type=float,
        default=1e-8,
        help="relative tolerance for residuals and PSD margins (default 1e-8)",
    )
    _common(p, seeds=False)
    p.set_defaults(func=run_verify_cmd)

    for name, coupling, fig in (("figure1", 0.05, "Figure 1"), ("figure2", 0.3, "Figure 2")):
        p = tsub.add_parser(
            name,
            help=f"the paper's {fig}: k-PL error vs samples (J={coupling})",
            description=f"{fig}: fit a full Ising model by k-PL on samples of a "
            f"4-clique with J={coupling}, h=0; the exact prediction Tr(Gamma^k)/(n d) "
            "is drawn over each empirical curve.",
        )
        p.add_argument("--coupling", type=float, default=coupling, help=f"J (default {coupling})")
        p.add_argument(
            "--sizes",
            type=_int_list,
            default=EstimationSettings.sample_sizes,
            help="comma-separated sample sizes n",
        )
        p.add_argument(
            "--masks-per-sample",
            choices=("one", "all"),
            default="one",
            help="one random mask per sample (the theory's setting, default) or every "
            "mask applied to every sample",
        )
        _common(p, seeds=True)
        p.set_defaults(func=run_estimation_cmd, figure=name)

    p = tsub.add_parser(
        "figure3",
        help="the paper's Figure 3: k-Gibbs vs independent parallel",
        description="Steps from R_-1 to R_1 (N=10, |C_G|=4, h=5) for k-Gibbs and "
        "the independent parallel sampler, with Propositions 4 and 5.",
    )
    p.add_argument(
        "--couplings",
        type=_float_list,
        default=HittingSettings.couplings,
        help="comma-separated clique couplings J",
    )
    p.add_argument("--ks", type=_int_list, default=HittingSettings.ks, help="comma-separated k")
    p.add_argument("--budget", type=int, default=1000, help="step budget (default 1000)")
    _common(p, seeds=True)
    p.set_defaults(func=run_hitting_cmd)

    p = tsub.add_parser(
        "poincare", help="exact Poincare constant of k-Gibbs on a random Ising model"
    )
    p.add_argument("--n", type=int, default=16, help="number of spins N (default 16)")
    p.add_argument("--k", type=int, default=1, help="block size k (default 1)")
    p.add_argument("--scale", type=float, default=0.2, help="std of J_ij and h_i (default 0.2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", choices=("auto", "dense", "lanczos"), default="auto")
    p.add_argument("--json", action="store_true", help="print one JSON object only")
    p.set_defaults(func=run_poincare_cmd)

    p = tsub.add_parser(
        "bench",
        help="time verify, the figures and Poincare constants vs N",
        description="Prints the settings and times of every theory target, then one JSON line.",
    )
    p.add_argument("--out", type=Path, default=Path("runs/theory-bench"))
    p.add_argument(
        "--limit",
        type=float,
        default=60.0,
        help="stop growing N once one Poincare computation exceeds this many seconds",
    )
    p.set_defaults(func=run_bench_cmd)


def _common(p: argparse.ArgumentParser, seeds: bool) -> None:
    if seeds:
        p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
        p.add_argument("--reps", type=int, default=10, help="repetitions (default 10)")
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got '{text}'"
        ) from None


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got '{text}'"
        ) from None


def make_output_folder(args: argparse.Namespace) -> None:
    """Create --out before the work, so that a bad path fails fast, not after minutes."""
    make_dirs(args.out, f"--out {args.out}")


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def run_verify_cmd(args: argparse.Namespace) -> int:
    make_output_folder(args)
    settings = VerifySettings(min_n=args.min_n, max_n=args.max_n, seed=args.seed, tol=args.tol)
    report = run_verify(settings, progress=not args.json)
    data = report.to_json()
    data["environment"] = environment()
    atomic_write_json(args.out / "verify.json", data)
    if args.json:
        print(json.dumps({k: v for k, v in data.items() if k != "rows"}))
    else:
        print(
            f"verify: N={settings.min_n}..{settings.max_n}, seed={settings.seed}, "
            f"{len(report.rows)} (model, k) cases, tol={settings.tol:g} (relative)"
        )
        print(f"{'claim':18s} {'kind':9s} {'worst':>12s} {'checks':>7s}  result  where")
        for claim, v in report.worst().items():
            print(
                f"{claim:18s} {v['kind']!s:9s} {v['worst']:12.3e} {v['checks']!s:>7s}  "
                f"{'ok' if v['passed'] else 'FAIL':6s}  {v['at']}"
            )
        print(
            f"{'passed' if report.passed else 'FAILED'} in {report.seconds:.1f} s; "
            f"details in {args.out / 'verify.json'}"
        )
    return 0 if report.passed else 1


def run_estimation_cmd(args: argparse.Namespace) -> int:
    make_output_folder(args)
    settings = EstimationSettings(
        coupling=args.coupling,
        sample_sizes=args.sizes,
        repetitions=args.reps,
        seed=args.seed,
        masks_per_sample=args.masks_per_sample,
    )
    result = estimation_figure(settings, args.figure)
    return _report(
        result, args, ["k", "n", "mse_mean", "mse_std", "predicted_mse", "not_converged"]
    )


def run_hitting_cmd(args: argparse.Namespace) -> int:
    make_output_folder(args)
    settings = HittingSettings(
        couplings=args.couplings,
        ks=args.ks,
        budget=args.budget,
        repetitions=args.reps,
        seed=args.seed,
    )
    result = hitting_figure(settings)
    return _report(
        result,
        args,
        [
            "J",
            "sampler",
            "hit_fraction",
            "steps_mean",
            "steps_median",
            "prop4_expected_bound",
            "prop5_hit_probability_bound",
        ],
    )


def _report(result: FigureResult, args: argparse.Namespace, columns: list[str]) -> int:
    result.extra["environment"] = environment()
    paths = write_figure(result, args.out)
    if args.json:
        print(
            json.dumps(
                {
                    "figure": result.name,
                    "settings": result.settings,
                    "seconds": result.seconds,
                    "files": [str(p) for p in paths],
                }
            )
        )
        return 0
    print(f"{result.name}: {json.dumps(result.settings)}")
    print("\n".join(summary_lines(result, columns)))
    print(f"{result.name} done in {result.seconds:.1f} s; wrote {', '.join(str(p) for p in paths)}")
    return 0


def random_ising(n: int, scale: float, seed: int) -> IsingModel:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.normal(0.0, scale, (n, n)), 1)
    return IsingModel(upper + upper.T, rng.normal(0.0, scale, n))


def poincare_timing(
    n: int, k: int, scale: float, seed: int, method: str = "auto"
) -> dict[str, Any]:
    start = time.perf_counter()
    model = random_ising(n, scale, seed)
    gap = poincare_constant(BlockDynamics(model.distribution, MaskingScheme.k_pl(n, k)), method)
    return {
        "n": n,
        "k": k,
        "states": 2**n,
        "scale": scale,
        "seed": seed,
        "method": gap.method,
        "poincare": gap.poincare,
        "spectral_gap": gap.gap,
        "seconds": time.perf_counter() - start,
    }


def run_poincare_cmd(args: argparse.Namespace) -> int:
    row = poincare_timing(args.n, args.k, args.scale, args.seed, args.method)
    if args.json:
        print(json.dumps(row))
    else:
        print(
            f"{args.k}-Gibbs on a random Ising model, N={args.n} ({2**args.n:,} states), "
            f"J_ij, h_i ~ N(0, {args.scale}^2), seed {args.seed}"
        )
        print(
            f"Poincare constant C = {row['poincare']:.10g} (spectral gap {row['spectral_gap']:.6g},"
            f" {row['method']}) in {row['seconds']:.2f} s"
        )
    return 0


def run_bench_cmd(args: argparse.Namespace) -> int:
    import torch  # only to report the thread count used by the process

    make_output_folder(args)

    results: dict[str, Any] = {
        "environment": environment(),
        "torch_threads": torch.get_num_threads(),
    }
    start = time.perf_counter()
    report = run_verify(VerifySettings())
    results["verify_default_seconds"] = report.seconds
    results["verify_passed"] = report.passed
    print(
        f"verify (N=2..8, seed 0): {report.seconds:.1f} s, passed={report.passed} [target < 60 s]"
    )
    fig_seconds = 0.0
    for name, coupling in (("figure1", 0.05), ("figure2", 0.3)):
        res = estimation_figure(EstimationSettings(coupling=coupling), name)
        write_figure(res, args.out)
        fig_seconds += res.seconds
        print(f"{name} (paper settings): {res.seconds:.1f} s")
    res = hitting_figure(HittingSettings())
    write_figure(res, args.out)
    fig_seconds += res.seconds
    print(f"figure3 (paper settings): {res.seconds:.1f} s")
    print(f"figures 1+2+3 together: {fig_seconds:.1f} s [target < 120 s]")
    results["figures_seconds"] = fig_seconds
    rows = []
    n = 12
    while True:
        row = poincare_timing(n, 1, 0.2, 0)
        rows.append(row)
        print(
            f"Poincare, 1-Gibbs, N={n:2d} ({2**n:>9,} states): C={row['poincare']:.6g} "
            f"in {row['seconds']:.1f} s ({row['method']})"
        )
        if row["seconds"] > args.limit or n >= 22:
            break
        n += 2
    within = [r["n"] for r in rows if r["seconds"] <= args.limit]
    results["poincare"] = rows
    results["poincare_n16_seconds"] = next((r["seconds"] for r in rows if r["n"] == 16), None)
    results["largest_n_within_limit"] = max(within) if within else None
    results["total_seconds"] = time.perf_counter() - start
    print(f"largest N within {args.limit:.0f} s: {results['largest_n_within_limit']}")
    atomic_write_json(args.out / "bench.json", results)
    print(json.dumps({k: v for k, v in results.items() if k != "poincare"}))
    if not report.passed:
        raise GmlmError("verify failed during the benchmark; run `gmlm theory verify` for details")
    return 0
