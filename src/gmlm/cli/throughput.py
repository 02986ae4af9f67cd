"""`gmlm throughput`: training speed of a config, fp32 against bf16 autocast."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "throughput",
        help="training throughput (target tokens/s), fp32 vs bf16",
        description="Times optimizer steps of the given config on real batches of DATA, fp32 "
        "and bf16 autocast interleaved; prints the settings, a table, whether precision=auto "
        "(bf16 on every CPU) is the faster choice on this machine, and one JSON line.",
    )
    p.add_argument("--config", default="small-padir", help="preset or YAML file")
    p.add_argument("--steps", type=int, default=6, help="timed steps per precision (default 6)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="data=DIR and overrides")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmlm.training.config import load_train_config
    from gmlm.training.throughput import measure_throughput, precision_verdict

    cfg = load_train_config(args.config, args.overrides)
    report = measure_throughput(cfg, steps=args.steps, warmup=args.warmup)
    print("settings: " + json.dumps(report.settings))
    for name, rate in report.tokens_per_s.items():
        print(f"{args.config:14s} {name}: {rate:10,.0f} target tokens/s (median)")
    print(f"bf16 / fp32 speed-up: {report.speedup_median:.2f}x (median of interleaved pairs)")
    print(precision_verdict(report))
    print(json.dumps({"config": args.config, **asdict(report)}))
    return 0
