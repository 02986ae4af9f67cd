"""The ceiling of `gmlm loadtest` and `gmlm serve` together, without a model: a service whose
one model ("echo") answers every line at once with the line itself, loaded by `gmlm loadtest`
at each of --rates. What it shows is the requests per second the HTTP layer, the handler, the
batcher and the load generator can carry on this machine, so that a capacity a real model
reaches near it is known to be theirs, not the model's. Run from the repository root on an
otherwise idle machine:

    .venv/bin/python tools/serve_ceiling.py [--rates 250,500,1000,1500,2000] [--duration 8]
        [--http {auto,h11,httptools}] [--output ceiling.json]

The service runs in a process of its own (the load generator's event loop and the service's
do not share a GIL); both take what cores they are given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gmlm.decoding.options import SearchOptions
from gmlm.serve.backends import Prepared
from gmlm.serve.http_client import TransportError, get

LINES = ["Ein Hund läuft über die Wiese.", "Zwei Kinder spielen am Strand.", "Eine Frau liest."]


class Echo:
    """A model that answers each line with itself, at once."""

    name: str = "echo"
    kind: str = "fake"
    device: str = "cpu"
    source: str = "memory"
    languages: str | None = None
    rescored_by: str | None = None

    def prepare(self, texts: Sequence[str], settings: Mapping[str, Any], seed: int) -> Prepared:
        return Prepared(SearchOptions(), seed, sum(len(t.split()) for t in texts), len(texts))

    def translate(self, texts: Sequence[str], prepared: Prepared) -> list[str]:
        return list(texts)

    def close(self) -> None:
        pass


def serve(http: str, log: bool) -> None:
    """The service (a child process): prints its URL, then serves until killed."""
    import uvicorn

    from gmlm.serve import logs
    from gmlm.serve.app import create_app
    from gmlm.serve.server import bind
    from gmlm.serve.settings import ServeSettings

    sock = bind("127.0.0.1", 0)
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    if log:  # a line per request on stderr, as `gmlm serve` logs
        logs.configure()
    app = create_app(lambda: {"echo": Echo()}, ServeSettings())
    config = uvicorn.Config(app, log_level="error", access_log=False, log_config=None, http=http)
    config.load()
    print(f"echo service: HTTP by {config.http_protocol_class.__name__}", file=sys.stderr)
    uvicorn.Server(config).run(sockets=[sock])


def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(TransportError):  # not listening yet
            if get(url + "/ready", 5.0).status_code == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"the echo service at {url} did not become ready in {timeout_s:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="250,500,1000,1500,2000")
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--p99-limit-ms", type=float, default=100.0)
    parser.add_argument("--output", type=Path, help="also write the result as JSON (LoadResult)")
    parser.add_argument(
        "--http",
        choices=("auto", "h11", "httptools"),
        default="auto",
        help="uvicorn's HTTP parser (auto: httptools where installed, as gmlm serve runs)",
    )
    parser.add_argument(
        "--log",
        action="store_true",
        help="log a line per request to stderr as `gmlm serve` does (the service's stderr goes "
        "to /dev/null here)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.http, args.log)
        return
    from gmlm.serve.load_report import markdown
    from gmlm.serve.loadtest import LoadSettings, run_loadtest

    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--http",
            args.http,
            *(["--log"] if args.log else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if args.log else None,
        text=True,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        threading.Thread(target=child.stdout.read, daemon=True).start()
        wait_ready(url)
        rates = tuple(float(r) for r in args.rates.split(","))
        settings = LoadSettings(
            rates=rates, duration=args.duration, warmup=5, p99_limit_ms=args.p99_limit_ms
        )
        result = run_loadtest(url, ["echo"], LINES, settings)
        print()
        print(markdown(result))
        if args.output:
            args.output.write_text(json.dumps(result.to_json(), indent=1), encoding="utf-8")
    finally:
        child.terminate()
        child.wait(timeout=30)


if __name__ == "__main__":
    main()
