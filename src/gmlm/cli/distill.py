"""`gmlm distill`: sequence-level knowledge distillation of a prepared dataset's training split.

Argument parsing only; the work is in `gmlm.translation.distill` (imported when the command runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gmlm.cli.flags import add_batching, add_device, add_no_progress, add_precision, number
from gmlm.cli.options import setting_type
from gmlm.config import SENTENCES, THREADS
from gmlm.decoding.options import (
    FLOAT_PRECISIONS,
    MAX_TOKENS_DEFAULT,
    MAX_TOKENS_WHY,
    SearchOptions,
)


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
    p.add_argument(
        "--beam",
        type=setting_type(SearchOptions, "beam"),
        default=5,
        help="teacher beam size (default: 5)",
    )
    add_batching(p, MAX_TOKENS_DEFAULT, MAX_TOKENS_WHY)
    add_precision(
        p,
        "fp32, or bf16 weights and activations (default: bf16 on GPUs with bf16, fp32 on "
        "every CPU, so that every CPU model distills the same data)",
        default=None,
        old_switch="--fp32",
        choices=FLOAT_PRECISIONS,
    )
    p.add_argument(
        "--threads",
        type=number(int, THREADS),
        default=0,
        help="torch CPU threads (default: torch's choice, all cores). Use 1 when another job "
        "shares the cores: 2 threads competing with a 2-thread training job on 2 cores were "
        "measured 10x slower than 1 thread",
    )
    p.add_argument(
        "--chunk-sentences",
        type=number(int, SENTENCES),
        default=None,
        help="sentences per saved chunk, the unit of resuming and, under torchrun, of sharing "
        "the work between processes (e.g. torchrun --nproc_per_node 4 -m gmlm distill ...; "
        "the result is the same as one process's) (default: 1,000)",
    )
    add_device(p)
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmlm.translation.distill import distill

    distill(
        args.teacher,
        args.data,
        args.out,
        beam=args.beam,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        bf16=None if args.precision is None else args.precision == "bf16",
        threads=args.threads,
        device=args.device,
        progress=not args.no_progress,
        **({} if args.chunk_sentences is None else {"chunk_sentences": args.chunk_sentences}),
    )
    return 0
