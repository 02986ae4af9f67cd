"""`gmlm average`: a run's kept history weights, averaged over a range of steps, as a
checkpoint folder (gmlm.training.averaging)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gmlm.cli.options import add_option_flags, settings_from_args
from gmlm.training.average_settings import AverageSettings


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "average",
        help="average a training run's kept checkpoints over a range of steps",
        description="Writes the element-wise mean of the weights that --run's history/ keeps "
        "at steps --first to --last (inclusive) to --out, a checkpoint folder that `gmlm "
        "translate`, `bench` and `analyze` load like any other: what the run's own "
        "average_last does when it ends, for any range of the steps it keeps (a run keeps "
        "the weights of its last keep_history validations). For instance --first 8000 --last "
        "10000 of a run that goes on to 20,000 steps is the run as a 10,000-step schedule "
        "would have averaged it. The configuration, tokenizer and language pair are those of "
        "the run's `last` checkpoint; meta.json records the files averaged.",
    )
    p.add_argument("--run", type=Path, required=True, help="a training run folder (out= of train)")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder to write (atomically; created if missing): a new or empty one, never "
        "inside a checkpoint or training run folder",
    )
    add_option_flags(p, {"settings": AverageSettings})
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmlm.training.averaging import average_run

    done = average_run(args.run, args.out, settings_from_args(AverageSettings, args))
    steps = done.steps
    print(
        f"wrote {done.out}: the mean of {len(steps)} checkpoint(s) of {args.run}, steps "
        f"{steps[0]} to {steps[-1]} ({', '.join(str(s) for s in steps)})"
    )
    return 0
