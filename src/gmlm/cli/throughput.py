"""`gmlm throughput`: training speed of a config, fp32 against bf16 autocast."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from gmlm.cli.options import add_option_flags, settings_from_args
from gmlm.training.throughput_settings import ThroughputSettings


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
    add_option_flags(p, {"throughput": ThroughputSettings})
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="data=DIR and overrides")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gmlm.training.config import load_train_config
    from gmlm.training.throughput import measure_throughput, precision_verdict

    cfg = load_train_config(args.config, args.overrides)
    report = measure_throughput(cfg, settings_from_args(ThroughputSettings, args))
    print("settings: " + json.dumps(report.settings))
    for name, rate in report.tokens_per_s.items():
        mfu = report.flop_utilisation.get(name)
        print(
            f"{args.config:14s} {name}: {rate:10,.0f} target tokens/s (median), "
            f"{report.model_tflops[name]:.2f} model TFLOP/s (6 x parameters x tokens/s), MFU "
            + ("n/a (peak unknown)" if mfu is None else f"{mfu:.1%}")
        )
    if report.speedup_median is not None:
        print(f"bf16 / fp32 speed-up: {report.speedup_median:.2f}x (median of interleaved pairs)")
    print(precision_verdict(report))
    print(json.dumps({"config": args.config, **asdict(report)}))
    return 0
