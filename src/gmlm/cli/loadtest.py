"""`gmlm loadtest`: open-loop load on a running `gmlm serve` (the work: gmlm.serve.loadtest)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gmlm.cli.flags import add_output
from gmlm.cli.options import add_option_flags, settings_from_args
from gmlm.errors import GmlmError
from gmlm.serve.loadtest import LoadSettings

if TYPE_CHECKING:
    from gmlm.serve.loadtest import LoadResult

EXAMPLES = Path(__file__).resolve().parents[1] / "reproduce" / "examples.de"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "loadtest",
        help="open-loop load on a running gmlm serve: latency and capacity per model and rate",
        description="Send Poisson arrivals at each offered rate to a gmlm service on this "
        "machine (loopback only) and report, per model and rate, the latency percentiles, the "
        "achieved throughput, errors by status, the service's queue wait and batch sizes, and "
        "each model's capacity (the highest rate with p99 under --p99-limit-ms and no errors).",
    )
    p.add_argument(
        "--url", default="http://127.0.0.1:8080", help="the service (default: %(default)s)"
    )
    p.add_argument(
        "--serve",
        metavar="ARGS",
        help="start `gmlm serve ARGS` on a free port for the test and stop it after (SIGTERM), "
        "e.g. --serve='--threads 2 --model padir=checkpoints/multi30k-de-en/padir' (with '=': "
        "the ARGS start with a dash); --url is then ignored",
    )
    p.add_argument(
        "--model", action="append", help="a served model to load (repeat; default: every one)"
    )
    p.add_argument(
        "--input",
        type=Path,
        default=EXAMPLES,
        help="sentences to send, one per line, used in turn (.gz allowed; default: gmlm's 12 "
        "German examples)",
    )
    p.add_argument(
        "--options",
        action="append",
        default=[],
        metavar="MODEL=JSON",
        help="decoding settings of one model's requests, e.g. ar='{\"beam\": 5}' (repeat; "
        "default: each model's own)",
    )
    add_option_flags(p, {"load": LoadSettings})
    add_output(p, "the result as JSON")
    p.add_argument("--markdown", type=Path, help="the table as Markdown")
    p.add_argument("--plot", type=Path, help="latency against offered load, PNG")
    p.set_defaults(func=run)


def _load(
    args: argparse.Namespace, url: str, texts: list[str], options: dict[str, dict[str, object]]
) -> LoadResult:
    from gmlm.serve.loadtest import check_loopback, run_loadtest

    models = args.model
    if not models:
        from gmlm.serve import http_client

        try:
            served = http_client.get(check_loopback(url) + "/v1/models", 10.0).json()
        except http_client.TransportError as err:
            raise GmlmError(f"--url {url}: no service answers ({err}); start gmlm serve") from None
        models = [m["name"] for m in served["models"]]
    return run_loadtest(
        url,
        models,
        texts,
        settings_from_args(LoadSettings, args),
        options=options,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )


def serve_arguments(text: str) -> list[str]:
    """The arguments of `gmlm serve` in the --serve string, split as a shell would."""
    try:
        return shlex.split(text)
    except ValueError as err:
        raise GmlmError(
            f"--serve {text!r}: cannot split it into arguments as a shell would ({err}); "
            "close every quote, e.g. --serve='--threads 2 --model padir=FOLDER'"
        ) from None


def run(args: argparse.Namespace) -> int:
    from gmlm.data.textfiles import read_lines
    from gmlm.io import atomic_write_text, check_output_files
    from gmlm.serve.load_report import markdown, plot

    check_output_files(
        (("--output", args.output), ("--markdown", args.markdown), ("--plot", args.plot)),
        inputs={"--input": args.input},
    )
    serve_args = None if args.serve is None else serve_arguments(args.serve)
    options: dict[str, dict[str, object]] = {}
    for spec in args.options:
        name, sep, text = spec.partition("=")
        try:
            value = json.loads(text) if sep else None
        except json.JSONDecodeError as err:
            raise GmlmError(f"--options {spec!r}: not JSON ({err})") from None
        if not name or not isinstance(value, dict):
            raise GmlmError(f"--options {spec!r}: expected MODEL=JSON, e.g. ar='{{\"beam\": 5}}'")
        options[name] = value
    texts = read_lines(args.input)
    if serve_args is None:
        result = _load(args, args.url, texts, options)
    else:
        from gmlm.serve.loadtest import spawned_service

        with spawned_service(serve_args) as url:
            result = _load(args, url, texts, options)
    table = markdown(result)
    print(table)
    if args.output is not None:
        result.write(args.output)
    if args.markdown is not None:
        atomic_write_text(args.markdown, table)
    if args.plot is not None:
        plot(result, args.plot)
    print(json.dumps({"capacity_rps": result.capacity_rps}))
    return 0
