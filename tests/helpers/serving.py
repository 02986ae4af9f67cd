"""A real gmlm service on an ephemeral loopback port, in a thread of the test process, and a
fake backend whose decoding a test holds and releases (tests/serve)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import httpx

from gmlm.decoding.options import SearchOptions
from gmlm.errors import GmlmError
from gmlm.serve.backends import Backend, Prepared
from gmlm.serve.settings import ServeSettings


class GatedBackend:
    """Upper-cases its lines once `gate` is set; a line "FAIL" fails its batch, a line "BAD"
    is refused by `prepare`. Records every batch it decodes."""

    kind = "fake"
    device = "cpu"
    source = "memory"
    languages = None
    rescored_by: str | None = None

    def __init__(self, name: str = "fake") -> None:
        self.name = name
        self.gate = threading.Event()
        self.gate.set()
        self.batches: list[list[str]] = []

    def prepare(self, texts: Sequence[str], settings: Mapping[str, Any], seed: int) -> Prepared:
        if "BAD" in texts:
            raise GmlmError("text: BAD is refused")
        return Prepared(SearchOptions(**settings), seed, len(texts), len(texts))

    def translate(self, texts: Sequence[str], prepared: Prepared) -> list[str]:
        if not self.gate.wait(timeout=30):
            raise RuntimeError("gate never opened")
        self.batches.append(list(texts))
        if "FAIL" in texts:
            raise RuntimeError("this batch fails")
        return [t.upper() for t in texts]

    def close(self) -> None:
        pass


@contextmanager
def running(
    load: Callable[[], Mapping[str, Backend]],
    settings: ServeSettings | None = None,
    ready_timeout: float = 60.0,
    wait_ready: bool = True,
    warmup: Callable[[Mapping[str, Backend]], Mapping[str, float]] | None = None,
) -> Iterator[str]:
    """Serve the app of `load` on 127.0.0.1 at a free port; yields its base URL."""
    import uvicorn

    from gmlm.serve.app import create_app
    from gmlm.serve.server import bind

    settings = settings or ServeSettings()
    app = create_app(load, settings, warmup)
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="error", access_log=False, log_config=None)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + ready_timeout
    path = "/ready" if wait_ready else "/health"
    while True:
        try:
            if httpx.get(url + path, timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.should_exit = True
            raise TimeoutError(f"the test server at {url} did not answer {path}")
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
