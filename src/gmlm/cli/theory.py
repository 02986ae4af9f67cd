"""`gmlm theory ...`: exact checks of the paper's theory and its Figures 1-3.

Parses arguments and prints; the work is in :mod:`gmlm.theory`, imported when a command runs,
so building this parser (for `gmlm --help`) loads neither numpy nor scipy nor torch. Flags,
defaults and ranges come from the settings dataclasses of :mod:`gmlm.theory.settings`.
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

from gmlm.cli.flags import show
from gmlm.cli.options import setting_type
from gmlm.io import check_output_folder
from gmlm.theory.settings import (
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

    v = VerifySettings()
    p = tsub.add_parser(
        "verify",
        help="check Lemma 2 and Theorems 1-3 on a seeded grid of models",
        description="Exit status 1 if any claim fails beyond the tolerance. Every measure is "
        "scale-free (generalised eigenvalues of the two matrices compared).",
    )
    p.add_argument(
        "--min-n",
        type=setting_type(VerifySettings, "min_n"),
        default=v.min_n,
        help=f"smallest N (default {v.min_n})",
    )
    p.add_argument(
        "--max-n",
        type=setting_type(VerifySettings, "max_n"),
        default=v.max_n,
        help=f"largest N, at most 14 (default {v.max_n})",
    )
    p.add_argument(
        "--seed",
        type=setting_type(VerifySettings, "seed"),
        default=v.seed,
        help=f"seed of the models ({v.seed})",
    )
    p.add_argument(
        "--couplings",
        type=setting_type(VerifySettings, "coupling_scales"),
        default=v.coupling_scales,
        help="comma-separated std of the random models' J_ij (default "
        f"{show(v.coupling_scales)}; 1.0 is strongly coupled, cond(I) up to 2e10 at N=8)",
    )
    p.add_argument(
        "--fields",
        type=setting_type(VerifySettings, "field_scales"),
        default=v.field_scales,
        help=f"comma-separated std of their h_i (default {show(v.field_scales)})",
    )
    p.add_argument(
        "--clique-couplings",
        type=setting_type(VerifySettings, "clique_couplings"),
        default=v.clique_couplings,
        help=f"comma-separated J of the clique models (default {show(v.clique_couplings)})",
    )
    p.add_argument(
        "--tol",
        type=setting_type(VerifySettings, "tol"),
        default=v.tol,
        help=f"tolerance of residuals and margins, in (0, 1e-4] (default {v.tol:g})",
    )
    _common(p, None)
    p.set_defaults(func=writing_to_out(run_verify_cmd))

    e = EstimationSettings()
    for name, coupling, fig in (("figure1", 0.05, "Figure 1"), ("figure2", 0.3, "Figure 2")):
        p = tsub.add_parser(
            name,
            help=f"the paper's {fig}: k-PL error vs samples (J={coupling})",
            description=f"{fig}: fit a full Ising model by k-PL on samples of a "
            f"{e.clique_size}-clique with J={coupling}, h={e.field:g}; the exact prediction "
            "Tr(Gamma^k)/(n d) is drawn over each empirical curve.",
        )
        p.add_argument(
            "--coupling",
            type=setting_type(EstimationSettings, "coupling"),
            default=coupling,
            help=f"J (default {coupling})",
        )
        p.add_argument(
            "--sizes",
            type=setting_type(EstimationSettings, "sample_sizes"),
            default=e.sample_sizes,
            help=f"comma-separated sample sizes n (default {show(e.sample_sizes)})",
        )
        p.add_argument(
            "--masks-per-sample",
            choices=("one", "all"),
            default=e.masks_per_sample,
            help="one random mask per sample (the theory's setting, default) or every "
            "mask applied to every sample",
        )
        _common(p, EstimationSettings)
        p.set_defaults(func=writing_to_out(run_estimation_cmd), figure=name)

    h = HittingSettings()
    p = tsub.add_parser(
        "figure3",
        help="the paper's Figure 3: k-Gibbs vs independent parallel",
        description=f"Steps from R_-1 to R_1 (N={h.n_vars}, |C_G|={h.clique_size}, "
        f"h={h.field:g}) for k-Gibbs and the independent parallel sampler, with Propositions "
        "4 and 5.",
    )
    p.add_argument(
        "--couplings",
        type=setting_type(HittingSettings, "couplings"),
        default=h.couplings,
        help=f"comma-separated clique couplings J (default {show(h.couplings)})",
    )
    p.add_argument(
        "--ks",
        type=setting_type(HittingSettings, "ks"),
        default=h.ks,
        help=f"comma-separated k (default {show(h.ks)})",
    )
    p.add_argument(
        "--budget",
        type=setting_type(HittingSettings, "budget"),
        default=h.budget,
        help=f"step budget ({h.budget})",
    )
    _common(p, HittingSettings)
    p.set_defaults(func=writing_to_out(run_hitting_cmd))

    q = PoincareSettings()
    p = tsub.add_parser(
        "poincare",
        help="exact Poincare constant of k-Gibbs on a random Ising model (N <= 24)",
        description="J_ij and h_i i.i.d. N(0, scale^2). Prints the constant, the time and the "
        "peak memory. 1-Gibbs beyond 2^11 states uses the dedicated matrix-free operator. "
        "Before it starts, one line on stderr estimates the work and the memory (more than is "
        "free is an error); a long computation then prints its progress there.",
    )
    p.add_argument(
        "--n",
        type=setting_type(PoincareSettings, "n"),
        default=q.n,
        help=f"number of spins N, 1 to 24 (default {q.n})",
    )
    p.add_argument(
        "--k",
        type=setting_type(PoincareSettings, "k"),
        default=q.k,
        help=f"block size k, 1 to N (default {q.k}); the work grows with C(N, k)",
    )
    p.add_argument(
        "--scale",
        type=setting_type(PoincareSettings, "scale"),
        default=q.scale,
        help=f"std of J_ij, h_i ({q.scale})",
    )
    p.add_argument(
        "--seed",
        type=setting_type(PoincareSettings, "seed"),
        default=q.seed,
        help=f"seed of the model ({q.seed})",
    )
    p.add_argument(
        "--method", choices=("auto", "dense", "lanczos", "single-site"), default=q.method
    )
    _threads(p, PoincareSettings)
    p.add_argument("--json", action="store_true", help="print one JSON object only")
    p.set_defaults(func=run_poincare_cmd)

    b = BenchSettings()
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
    p.add_argument(
        "--limit",
        type=setting_type(BenchSettings, "limit"),
        default=b.limit,
        help="seconds one Poincare computation may take: N stops growing once the next N is "
        f"predicted to exceed it, and a computation is stopped at twice it (default {b.limit:g})",
    )
    p.add_argument(
        "--max-n",
        type=setting_type(BenchSettings, "max_n"),
        default=b.max_n,
        help=f"largest N ({b.max_n})",
    )
    _threads(p, BenchSettings)
    p.set_defaults(func=writing_to_out(run_bench_cmd))


def _common(p: argparse.ArgumentParser, seeded: type[Any] | None) -> None:
    """--out and --json, and for the settings class `seeded` (a figure's), --seed and --reps."""
    if seeded is not None:
        default = seeded()
        p.add_argument(
            "--seed",
            type=setting_type(seeded, "seed"),
            default=default.seed,
            help=f"random seed (default {default.seed})",
        )
        p.add_argument(
            "--reps",
            type=setting_type(seeded, "repetitions"),
            default=default.repetitions,
            help=f"repetitions (default {default.repetitions})",
        )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"output folder (default {DEFAULT_OUT}): new, or holding only theory results, "
        "which are replaced",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")


def _threads(p: argparse.ArgumentParser, settings: type[Any]) -> None:
    p.add_argument(
        "--threads",
        type=setting_type(settings, "threads"),
        default=None,
        help="threads of the 1-Gibbs product (default: OMP_NUM_THREADS, else all usable CPUs)",
    )


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

    settings = VerifySettings(
        min_n=args.min_n,
        max_n=args.max_n,
        seed=args.seed,
        coupling_scales=args.couplings,
        field_scales=args.fields,
        clique_couplings=args.clique_couplings,
        tol=args.tol,
    )
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

    settings = EstimationSettings(
        coupling=args.coupling,
        sample_sizes=args.sizes,
        repetitions=args.reps,
        seed=args.seed,
        masks_per_sample=args.masks_per_sample,
    )
    columns = ["k", "n", "mse_mean", "mse_std", "predicted_mse", "fits"]
    columns += ["no_finite_minimiser", "not_converged"]
    return _report(estimation_figure(settings, args.figure), args, columns)


def run_hitting_cmd(args: argparse.Namespace) -> int:
    from gmlm.theory.figures import hitting_figure

    settings = HittingSettings(
        couplings=args.couplings,
        ks=args.ks,
        budget=args.budget,
        repetitions=args.reps,
        seed=args.seed,
    )
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

    settings = PoincareSettings(
        n=args.n,
        k=args.k,
        scale=args.scale,
        seed=args.seed,
        method=args.method,
        threads=args.threads,
    )
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

    settings = BenchSettings(limit=args.limit, max_n=args.max_n, threads=args.threads)
    data = run_bench(settings, args.out, progress=print)
    print(f"largest N within {settings.limit:g} s: {data['largest_n_within_limit']}")
    print(json.dumps({k: v for k, v in data.items() if k != "poincare"}))
    if not data["verify_passed"]:
        raise GmlmError("verify failed during the benchmark; run `gmlm theory verify` for details")
    return 0
