"""`gmlm throughput`: training speed of a config, fp32 against bf16 autocast."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from gmlm.cli.flags import number
from gmlm.config import TIMED, WARMUP


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "throughput",
        help="training throughput (target tokens/s), fp32 vs bf16",
        description="Times optimizer steps of the given config on real batches of DATA, fp32 "
        "and bf16 autocast interleaved (or one of them, --precision); prints the settings, a "
        "table, whether precision=auto is the faster choice on this machine, and one JSON "
        "line.",
    )
    p.add_argument("--config", default="small-padir", help="preset or YAML file")
    p.add_argument(
        "--steps",
        type=number(int, TIMED),
        default=6,
        help="timed steps per precision (default 6)",
    )
    p.add_argument(
        "--warmup", type=number(int, WARMUP), default=2, help="untimed steps first (default 2)"
    )
    p.add_argument(
        "--precision",
        type=training_precisions,
        default=("fp32", "bf16"),
        help="comma-separated training precisions to time: fp32 and/or bf16 autocast "
        "(default: fp32,bf16; fp32 alone where bf16 is emulated and slow)",
    )
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="data=DIR and overrides")
    p.set_defaults(func=run)


def training_precisions(text: str) -> tuple[str, ...]:
    """Comma-separated training precisions: fp32 and/or bf16."""
    values = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    if not values or any(v not in ("fp32", "bf16") for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: choose fp32 and/or bf16, e.g. fp32,bf16")
    return values


def run(args: argparse.Namespace) -> int:
    from gmlm.training.config import load_train_config
    from gmlm.training.throughput import measure_throughput, precision_verdict

    cfg = load_train_config(args.config, args.overrides)
    report = measure_throughput(
        cfg, steps=args.steps, warmup=args.warmup, precisions=args.precision
    )
    print("settings: " + json.dumps(report.settings))
    for name, rate in report.tokens_per_s.items():
        print(f"{args.config:14s} {name}: {rate:10,.0f} target tokens/s (median)")
    if report.speedup_median is not None:
        print(f"bf16 / fp32 speed-up: {report.speedup_median:.2f}x (median of interleaved pairs)")
    print(precision_verdict(report))
    print(json.dumps({"config": args.config, **asdict(report)}))
    return 0
