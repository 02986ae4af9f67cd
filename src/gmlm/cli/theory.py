"""`gmlm theory ...`: exact checks of the paper's theory and its Figures 1-3.

Parses arguments and prints; the work is in :mod:`gmlm.theory`, imported when a command runs,
so building this parser (for `gmlm --help`) loads neither numpy nor scipy nor torch. Flags,
defaults and ranges are derived from the settings dataclasses of :mod:`gmlm.theory.settings`
(:mod:`gmlm.cli.options`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gmlm.cli.flags import add_json, show
from gmlm.cli.options import add_option_flags, settings_from_args
from gmlm.io import check_output_folder
from gmlm.theory.settings import (
    FIGURE_COUPLINGS,
    BenchSettings,
    EstimationSettings,
    HittingSettings,
    PoincareSettings,
    VerifySettings,
)

DEFAULT_OUT = Path("runs/theory")
# The files the theory commands write into --out: `verify` (verify.json), the figures
# (gmlm.theory.figures.write_figure) and `bench` (gmlm.theory.bench.run_bench).
RESULT_FILE = re.compile(r"verify\.json|bench\.json|figure[1-3]\.(csv|json|png)")


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
        description="Exit status 1 if any claim fails beyond the tolerance. Every measure is "
        "scale-free (generalised eigenvalues of the two matrices compared).",
    )
    add_option_flags(p, {"verify": VerifySettings})
    _common(p)
    p.set_defaults(func=writing_to_out(run_verify_cmd))

    e = EstimationSettings()
    for name, coupling in FIGURE_COUPLINGS.items():
        fig = f"Figure {name[-1]}"
        p = tsub.add_parser(
            name,
            help=f"the paper's {fig}: k-PL error vs samples (J={coupling})",
            description=f"{fig}: fit a full Ising model by k-PL on samples of a "
            f"{e.clique_size}-clique with J={coupling}, h={e.field:g}; the exact prediction "
            "Tr(Gamma^k)/(n d) is drawn over each empirical curve.",
        )
        add_option_flags(p, {name: EstimationSettings}, defaults={"coupling": coupling})
        _common(p)
        p.set_defaults(func=writing_to_out(run_estimation_cmd), figure=name)

    h = HittingSettings()
    p = tsub.add_parser(
        "figure3",
        help="the paper's Figure 3: k-Gibbs vs independent parallel",
        description=f"Steps from R_-1 to R_1 (N={h.n_vars}, |C_G|={h.clique_size}, "
        f"h={h.field:g}) for k-Gibbs and the independent parallel sampler, with Propositions "
        "4 and 5.",
    )
    add_option_flags(p, {"figure3": HittingSettings})
    _common(p)
    p.set_defaults(func=writing_to_out(run_hitting_cmd))

    p = tsub.add_parser(
        "poincare",
        help="exact Poincare constant of k-Gibbs on a random Ising model (N <= 24)",
        description="J_ij and h_i i.i.d. N(0, scale^2). Prints the constant, the time and the "
        "peak memory. 1-Gibbs beyond 2^11 states uses the dedicated matrix-free operator. "
        "Before it starts, one line on stderr estimates the work and the memory (more than is "
        "free is an error); a long computation then prints its progress there.",
    )
    add_option_flags(p, {"poincare": PoincareSettings})
    add_json(p, "print one JSON object only")
    p.set_defaults(func=run_poincare_cmd)

    p = tsub.add_parser(
        "bench",
        help="time verify, the figures and Poincare constants vs N",
        description="Prints the settings, time and memory of every theory target, then one "
        "JSON line. N grows while the next N is predicted to fit in --limit.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/theory-bench"),
        help="output folder (default runs/theory-bench): new, or holding only theory results, "
        "which are replaced",
    )
    add_option_flags(p, {"bench": BenchSettings})
    p.set_defaults(func=writing_to_out(run_bench_cmd))


def _common(p: argparse.ArgumentParser) -> None:
    """--out and --json."""
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"output folder (default {DEFAULT_OUT}): new, or holding only theory results, "
        "which are replaced",
    )
    add_json(p, "print one JSON object instead of a table")


def holds_theory_results(folder: Path) -> bool:
    """Whether every file in `folder` is one the theory commands write there (hidden files
    aside: temporary ones): verify.json, bench.json, figureN.csv/json/png."""
    return all(
        RESULT_FILE.fullmatch(p.name) for p in folder.iterdir() if not p.name.startswith(".")
    )


def writing_to_out(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`run` with --out checked before the work, so that a bad path fails fast, not after
    minutes (a new folder, or one holding only theory results, which are replaced:
    gmlm.io.check_output_folder), and held by this process until it ends (gmlm.locking):
    another theory command writing there fails at once."""

    def locked(args: argparse.Namespace) -> int:
        from gmlm.locking import folder_lock

        check_output_folder(args.out, "--out", "a folder of theory results", holds_theory_results)
        with folder_lock(args.out, f"--out {args.out}"):
            return run(args)

    return locked


def run_verify_cmd(args: argparse.Namespace) -> int:
    from gmlm.theory.bench import environment
    from gmlm.theory.verify import run_verify

    settings = settings_from_args(VerifySettings, args)
    report = dataclasses.replace(
        run_verify(settings, progress=not args.json), environment=environment()
    )
    report.write(args.out / "verify.json")
    data = report.to_json()
    if args.json:
        print(json.dumps({k: v for k, v in data.items() if k != "rows"}))
    else:
        print(
            f"verify: N={settings.min_n}..{settings.max_n}, seed={settings.seed}, J scales "
            f"{show(settings.coupling_scales)}, h scales {show(settings.field_scales)}, "
            f"cliques J {show(settings.clique_couplings)}: {len(report.rows)} (model, k) cases, "
            f"cond(I) up to {report.max_fisher_condition:.2g}, tol={settings.tol:g} (on "
            "generalised eigenvalues: scale-free)"
        )
        print(f"{'claim':18s} {'kind':9s} {'worst':>12s} {'checks':>7s}  result  where")
        for claim, v in report.claims.items():
            print(
                f"{claim:18s} {v.kind!s:9s} {v.worst:12.3e} {v.checks!s:>7s}  "
                f"{'ok' if v.passed else 'FAIL':6s}  {v.at}"
            )
        print(
            f"{'passed' if report.passed else 'FAILED'} in {report.seconds:.1f} s; "
            f"details in {args.out / 'verify.json'}"
        )
    return 0 if report.passed else 1


def run_estimation_cmd(args: argparse.Namespace) -> int:
    from gmlm.theory.figures import estimation_figure

    settings = settings_from_args(
        EstimationSettings, args, defaults={"coupling": FIGURE_COUPLINGS[args.figure]}
    )
    columns = ["k", "n", "mse_mean", "mse_std", "predicted_mse", "fits"]
    columns += ["no_finite_minimiser", "not_converged"]
    return _report(estimation_figure(settings, args.figure), args, columns)


def run_hitting_cmd(args: argparse.Namespace) -> int:
    from gmlm.theory.figures import hitting_figure

    settings = settings_from_args(HittingSettings, args)
    columns = ["J", "sampler", "hit_fraction", "steps_mean", "steps_median"]
    columns += ["prop4_expected_bound", "prop4_excess_se", "prop5_hit_probability_bound"]
    return _report(hitting_figure(settings), args, columns)


def _report(result: Any, args: argparse.Namespace, columns: list[str]) -> int:
    from gmlm.theory.bench import environment
    from gmlm.theory.figures import summary_lines, write_figure

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


def run_poincare_cmd(args: argparse.Namespace) -> int:
    from gmlm.theory.bench import environment, poincare_run, run_line

    settings = settings_from_args(PoincareSettings, args)
    run = poincare_run(settings, say=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps({**run.to_json(), "environment": environment()}))
    else:
        print(
            f"{run.k}-Gibbs on a random Ising model, N={run.n} ({run.states:,} states), "
            f"J_ij, h_i ~ N(0, {run.scale}^2), seed {run.seed}"
        )
        print(f"{run_line(run)}; spectral gap {run.spectral_gap:.10g}")
    return 0


def run_bench_cmd(args: argparse.Namespace) -> int:
    from gmlm.errors import GmlmError
    from gmlm.theory.bench import run_bench

    settings = settings_from_args(BenchSettings, args)
    data = run_bench(settings, args.out, progress=print)
    print(f"largest N within {settings.limit:g} s: {data['largest_n_within_limit']}")
    print(json.dumps({k: v for k, v in data.items() if k != "poincare"}))
    if not data["verify_passed"]:
        raise GmlmError("verify failed during the benchmark; run `gmlm theory verify` for details")
    return 0
