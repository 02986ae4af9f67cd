"""`gmlm analyze attention|length`: argument parsing only; the work is in gmlm.analysis (imported
when the command runs, so `gmlm --help` does not load torch)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gmlm.records import Record

R = TypeVar("R", bound=Record)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "analyze",
        help="analyses of trained models (attention of stutter pairs, length prediction)",
        description="Analyses of trained checkpoints, as in Section 3.4 of the paper.",
    )
    analyze_sub = parser.add_subparsers(dest="analyze_command", metavar="SUBCOMMAND")
    analyze_sub.required = True

    p = analyze_sub.add_parser(
        "attention",
        help="self- and cross-attention of stutter vs other adjacent pairs (Tables 4, 5)",
        description="Decodes a split's sources with a PaDIR checkpoint and compares the last "
        "decoder layer's attention (final pass, chosen candidate) of adjacent output positions "
        "holding the same token (stutter pairs, counted before the final dedup) with the other "
        "adjacent pairs: self-attention weights between the two positions and top-k "
        "membership (Table 4), total variation and cosine distances of their source "
        "attention and top-k overlap (Table 5); min / avg / max over heads, mean +- std over "
        "pairs. Prints Markdown tables with the paper's cells where known (n/a otherwise).",
    )
    common_arguments(p)
    p.add_argument(
        "--stutter-remask",
        choices=("none", "previous", "initial"),
        help="stutter remasking between passes (default: previous, as `gmlm translate`); "
        "the final pass is never remasked, so its stutters are observable either way",
    )
    p.set_defaults(func=run_attention)

    p = analyze_sub.add_parser(
        "length",
        help="length prediction accuracy and decoding with the reference length (oracle)",
        description="Compares a PaDIR checkpoint's predicted target lengths with the "
        "references' (top-1 exact / within 1 / within 2, errors, reference among the top B) "
        "and decodes the split with T passes and (a) the top-1 predicted length, (b) the top B "
        "lengths for each --length-weights selection weight, (c) the reference length: BLEU, "
        "chrF, length ratio and stutter rate of each, to tell how much BLEU the length "
        "predictor costs. Rows (a) and (b) equal `gmlm translate --steps T --length-beam B`.",
    )
    common_arguments(p)
    p.add_argument(
        "--length-weights",
        type=weights,
        default=(0.0, 0.5),
        help="comma-separated selection weights of the length log-probability for the top-B "
        "decoding (default: 0,0.5; 0 is the paper's selection)",
    )
    p.set_defaults(func=run_length)


def common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint", type=Path, required=True, help="PaDIR checkpoint folder (or run folder)"
    )
    p.add_argument("--data", type=Path, required=True, help="prepared dataset folder")
    p.add_argument("--split", default="test", help="split to decode (default: test)")
    p.add_argument("--sentences", type=int, help="only the first N sentences (default: all)")
    p.add_argument("--steps", type=int, default=4, help="refinement passes T (default: 4)")
    p.add_argument(
        "--length-beam", type=int, default=5, help="predicted lengths decoded, B (default: 5)"
    )
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default: 32)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the initial random tokens, each line its own as in `gmlm translate`",
    )
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--out", type=Path, help="also write the JSON result to this file")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_attention(args: argparse.Namespace) -> int:
    from gmlm.analysis import attention_analysis, render_markdown

    return report(
        args,
        attention_analysis(**common_settings(args), stutter_remask=args.stutter_remask),
        render_markdown,
    )


def run_length(args: argparse.Namespace) -> int:
    from gmlm.analysis.length import length_analysis, render_length_markdown

    return report(
        args,
        length_analysis(**common_settings(args), length_weights=args.length_weights),
        render_length_markdown,
    )


def common_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `common_arguments`, as both analyses name them."""
    return {
        "checkpoint": args.checkpoint,
        "data": args.data,
        "split": args.split,
        "sentences": args.sentences,
        "steps": args.steps,
        "length_beam": args.length_beam,
        "batch_size": args.batch_size,
        "bf16": args.bf16,
        "seed": args.seed,
        "device": args.device,
        "progress": not args.no_progress,
    }


def report(args: argparse.Namespace, result: R, render: Callable[[R], str]) -> int:
    if args.out is not None:
        result.write(args.out)
    print(json.dumps(result.to_json()) if args.json else render(result).rstrip("\n"))
    return 0


def weights(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give numbers separated by commas") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more weights >= 0")
    return values
