"""Where a served request's time goes when it is not decoding, and how much of it is the client.

Starts `gmlm serve` with the shipped PaDIR (or --serve's arguments), then sends one test
sentence about every second (`--requests` of them), alternating two clients on one keep-alive
connection each: httpx (a general-purpose client, `gmlm loadtest`'s until it outgrew it) and
`gmlm.serve.http_client` (the load generator's own: one write, one read of the headers and
the body, next to no client cost). Per request: its latency, less its batch's decode time
(`timings.batch_ms`): all that is not decoding; and the part of that inside the service's
request handler (`total_ms - batch_ms`). Prints the medians per client. Run from the
repository root on an otherwise idle machine:

    .venv/bin/python tools/serve_client_split.py [--requests 40] [--input FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from pathlib import Path

import httpx

from gmlm.data.textfiles import read_lines
from gmlm.serve.http_client import Pool
from gmlm.serve.loadtest import spawned_service

SERVE = "--threads 2 --model padir=checkpoints/multi30k-de-en/padir"


async def measure(url: str, lines: list[str], requests: int, seed: int) -> dict[str, list[float]]:
    rows: dict[str, list[float]] = {
        f"{client} {what}": [] for client in ("httpx", "raw") for what in ("outside", "handler")
    }
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client, Pool(url, 60.0, 1) as raw:
        for i in range(requests):
            body = {"model": "padir", "text": [lines[i % len(lines)]]}
            name = "httpx" if i % 2 == 0 else "raw"
            sent = time.monotonic()
            if name == "httpx":
                answer = await client.post("/v1/translate", json=body)
                answer.raise_for_status()
                elapsed = 1000.0 * (time.monotonic() - sent)
                timings = answer.json()["timings"]
            else:
                reply = await raw.post("/v1/translate", body)
                elapsed = 1000.0 * (time.monotonic() - sent)
                if reply.status_code != 200:
                    raise RuntimeError(f"answer: {reply.status_code} {reply.text}")
                timings = reply.json()["timings"]
            if i >= 2:  # the first of each client opens its connection
                rows[f"{name} outside"].append(elapsed - float(timings["total_ms"]))
                rows[f"{name} handler"].append(
                    float(timings["total_ms"]) - float(timings["batch_ms"])
                )
            await asyncio.sleep(rng.uniform(0.5, 1.5))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40, help="requests in all (default 40)")
    parser.add_argument(
        "--input",
        default="../shared/data/multi30k/test_2016_flickr.de.gz",
        help="sentences to send, one per request",
    )
    parser.add_argument("--serve", default=SERVE, help=f"gmlm serve's arguments ({SERVE})")
    args = parser.parse_args()
    lines = read_lines(Path(args.input))
    with spawned_service(args.serve.split()) as url:
        rows = asyncio.run(measure(url, lines, args.requests, 0))
    print(f"{args.requests} requests at about 1/s, alternating clients; medians in ms:")
    for client in ("httpx", "raw"):
        outside = statistics.median(rows[f"{client} outside"])
        handler = statistics.median(rows[f"{client} handler"])
        print(
            f"  {client:5s}: outside the handler {outside:.2f}, in the handler but not "
            f"decoding {handler:.2f} ({len(rows[f'{client} outside'])} requests)"
        )


if __name__ == "__main__":
    main()
