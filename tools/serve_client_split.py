"""Where a served request's time goes when it is not decoding, and how much of it is the client.

Starts `gmlm serve` with the shipped PaDIR (or --serve's arguments), then sends one test
sentence about every second (`--requests` of them), alternating two clients on one keep-alive
connection each: httpx (what `gmlm loadtest` uses) and a minimal HTTP/1.1 client on asyncio
streams (one write, one read of the headers and Content-Length bytes: next to no client
cost). Per request: its latency, less its batch's decode time (`timings.batch_ms`): all that is
not decoding; and the part of that inside the service's request handler (`total_ms -
batch_ms`). Prints the medians per client. Run from the repository root on an otherwise idle
machine:

    .venv/bin/python tools/serve_client_split.py [--requests 40] [--input FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from gmlm.data.textfiles import read_lines
from gmlm.serve.loadtest import spawned_service

SERVE = "--threads 2 --model padir=checkpoints/multi30k-de-en/padir"


class RawClient:
    """HTTP/1.1 POSTs of JSON on one connection, written and read by hand."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = json.dumps(body).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode()
        self.writer.write(head + data)
        headers = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        if " 200 " not in headers[0] + " ":
            raise RuntimeError(f"answer: {headers[0]}")
        length = next(
            int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")
        )
        return dict(json.loads(await self.reader.readexactly(length)))

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


async def measure(url: str, lines: list[str], requests: int, seed: int) -> dict[str, list[float]]:
    raw = RawClient(url)
    rows: dict[str, list[float]] = {
        f"{client} {what}": [] for client in ("httpx", "raw") for what in ("outside", "handler")
    }
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
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
                timings = reply["timings"]  # type: ignore[assignment]
            if i >= 2:  # the first of each client opens its connection
                rows[f"{name} outside"].append(elapsed - float(timings["total_ms"]))
                rows[f"{name} handler"].append(
                    float(timings["total_ms"]) - float(timings["batch_ms"])
                )
            await asyncio.sleep(rng.uniform(0.5, 1.5))
    await raw.close()
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
