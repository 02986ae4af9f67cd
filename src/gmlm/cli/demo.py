"""`gmlm demo`: the main job on embedded data, what `make demo` runs.

Until the translation pipeline lands, the demo is the theory part of the reproduction: the exact
verification of Lemma 2 and Theorems 1-3, then the paper's Figures 1-3.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gmlm.cli.theory import run_estimation_cmd, run_hitting_cmd, run_verify_cmd
from gmlm.theory.figures import HittingSettings


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the demo (theory verification and Figures 1-3)",
        description="Runs `gmlm theory verify`, `figure1`, `figure2` and `figure3` "
        "with the paper's settings and writes PNG/CSV/JSON to --out.",
    )
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="output folder")
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    out = args.out / "theory"
    common = {"out": out, "json": False, "seed": 0, "reps": 10}
    status = run_verify_cmd(
        argparse.Namespace(min_n=2, max_n=8, seed=0, tol=1e-8, out=out, json=False)
    )
    for figure, coupling in (("figure1", 0.05), ("figure2", 0.3)):
        print()
        run_estimation_cmd(
            argparse.Namespace(
                figure=figure,
                coupling=coupling,
                sizes=(100, 200, 500, 1000, 2000, 5000, 10000, 20000),
                masks_per_sample="one",
                **common,
            )
        )
    print()
    run_hitting_cmd(
        argparse.Namespace(
            couplings=HittingSettings.couplings, ks=HittingSettings.ks, budget=1000, **common
        )
    )
    print(f"\ndemo outputs in {out}")
    return status
