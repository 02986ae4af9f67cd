"""`gmlm distill`: sequence-level knowledge distillation of a prepared dataset's training split.

Argument parsing only; the flags come from
:class:`~gmlm.translation.distill_settings.DistillSettings` and the shared batching flags, the
work is in `gmlm.translation.distill` (imported when the command runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gmlm.cli.flags import add_alias, add_batching, add_device, add_no_progress
from gmlm.cli.options import add_option_flags, settings_from_args
from gmlm.decoding.options import MAX_TOKENS_DEFAULT, MAX_TOKENS_WHY
from gmlm.translation.distill_settings import DistillSettings


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "distill",
        help="replace the training targets by an AR teacher's beam-search translations",
        description="Translates the cleaned training sources of --data with the autoregressive "
        "--teacher (beam search, longest sentences first) and writes --out as a prepared "
        "dataset: train = (source, teacher output), valid/test = the original splits with "
        "their references, the same tokenizer as --data, and distill.json recording the "
        "teacher, its step, the settings, counts and sentences/s. Work is saved in chunks "
        "(OUT/work/chunk-NNNNN.txt, written atomically): run the same command again after an "
        "interruption to resume. --out only holds a manifest once it is complete, and a "
        "complete --out made with the same teacher weights, data and settings is reused. An --out "
        "another gmlm command is writing is refused.",
    )
    p.add_argument(
        "--teacher",
        type=Path,
        required=True,
        help="AR checkpoint folder, or a run folder (its best, else averaged, else last)",
    )
    p.add_argument("--data", type=Path, required=True, help="prepared dataset to distill")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="distilled dataset folder to write: new, empty, or a distillation's (reused or "
        "resumed); --data, --teacher, any other folder, or one inside a checkpoint or "
        "training run, is refused",
    )
    add_option_flags(p, {"settings": DistillSettings})
    add_alias(p, "--fp32", "precision", "--precision fp32", const="fp32")
    add_batching(p, MAX_TOKENS_DEFAULT, MAX_TOKENS_WHY)
    add_device(p)
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmlm.translation.distill import distill

    distill(
        args.teacher,
        args.data,
        args.out,
        settings_from_args(DistillSettings, args),
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        device=args.device,
        progress=not args.no_progress,
    )
    return 0
