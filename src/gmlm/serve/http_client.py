"""A small asyncio HTTP/1.1 client for `gmlm loadtest`: kept-alive connections in a bounded
pool, one request at a time on each, nothing else.

Why not httpx: a load generator must offer its rate whatever the service does, and each
httpx request costs its process about a millisecond of CPU. On 2 AMD EPYC cores, against
a service whose model answers at once, `gmlm loadtest` on httpx held 500 requests/s, and at
1,000/s fell behind its own schedule until requests waited 14 s in the client (the
service's handler time stayed under 3 ms): a figure of the client, not of the service (the
runs: docs/history/serve-before-nodelay/README.md). This client reads and writes the few
bytes of a request with asyncio's streams and parses only what an HTTP/1.1 server sends: a
status line, headers, and a body of `Content-Length` bytes, in chunks, up to the close, or
none (1xx, 204, 304).

Every size is bounded before it is read: a status line and each header line by the
stream's line limit, the headers by `MAX_HEADERS`, a body by `MAX_BODY_BYTES`. A request
that does not finish within the pool's timeout raises :class:`Timeout`; a connection that
fails or answers garbage raises :class:`TransportError`; either way that connection is
closed, never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# The most header lines, the longest line (status or header) and the largest body an answer
# may have; larger is a TransportError (the load test's service answers far less).
MAX_HEADERS = 100
MAX_LINE_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
# How much a read of a body that ends with the connection asks for at a time.
READ_BYTES = 64 * 1024
# The kind of a TransportError for a connection that closed in the middle of an answer.
CLOSED = "closed early"
# How long a connection may sit idle in the pool and still be used: servers close idle
# kept-alive connections (uvicorn after 5 s), and a request written to one the server is
# closing meets the close instead of an answer.
IDLE_S = 2.0


class TransportError(Exception):
    """The connection failed, closed, or carried something that is not an HTTP answer;
    `kind` names which, in a few words (a load test counts its errors by it)."""

    def __init__(self, message: str, kind: str = "bad answer") -> None:
        super().__init__(message)
        self.kind = kind


class Timeout(TransportError):
    """No whole answer within the pool's timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "timeout")


@dataclass(frozen=True)
class Answer:
    status_code: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = time.monotonic()

    def fresh(self) -> bool:
        """Idle for less than IDLE_S and not closed by the server."""
        return not self.reader.at_eof() and time.monotonic() - self.idle_since < IDLE_S

    async def request(self, head: bytes, body: bytes) -> tuple[Answer, bool]:
        """Send one request; its answer and whether the connection may be used again."""
        self.writer.write(head + body)
        await self.writer.drain()
        status_line = await self._line()
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise TransportError(f"not an HTTP answer: {status_line[:80]!r}")
        headers: dict[bytes, bytes] = {}
        for count in range(MAX_HEADERS + 1):
            line = await self._line()
            if not line:
                break
            if count == MAX_HEADERS:
                raise TransportError(f"more than {MAX_HEADERS} header lines")
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        reusable = headers.get(b"connection", b"").lower() != b"close"
        status = int(parts[1])
        if status in (204, 304) or 100 <= status < 200:  # no body, whatever the headers say
            data = b""
        elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            data = await self._chunks()
        elif b"content-length" in headers:
            data = await self._exactly(_size(headers[b"content-length"]))
        else:  # the body ends with the connection
            data = await self._to_the_end()
            reusable = False
        return Answer(status, data), reusable

    async def _line(self) -> bytes:
        try:
            line = await self.reader.readuntil(b"\r\n")
        except asyncio.IncompleteReadError:
            raise TransportError("the connection closed before the answer ended", CLOSED) from None
        except asyncio.LimitOverrunError:
            raise TransportError(f"a line over {MAX_LINE_BYTES} bytes") from None
        return line[:-2]

    async def _exactly(self, size: int) -> bytes:
        try:
            return await self.reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise TransportError("the connection closed before the answer ended", CLOSED) from None

    async def _to_the_end(self) -> bytes:
        data = bytearray()
        while chunk := await self.reader.read(READ_BYTES):
            data += chunk
            if len(data) > MAX_BODY_BYTES:
                raise TransportError(f"a body over {MAX_BODY_BYTES} bytes")
        return bytes(data)

    async def _chunks(self) -> bytes:
        data = bytearray()
        while True:
            size = _size((await self._line()).split(b";", 1)[0].strip(), base=16)
            if len(data) + size > MAX_BODY_BYTES:
                raise TransportError(f"a body over {MAX_BODY_BYTES} bytes")
            if size == 0:
                while await self._line():  # trailers, then the empty line
                    pass
                return bytes(data)
            data += await self._exactly(size)
            if await self._line():
                raise TransportError("a chunk longer than its size")

    def close(self) -> None:
        self.writer.close()


def _size(text: bytes, base: int = 10) -> int:
    try:
        size = int(text, base)
    except ValueError:
        raise TransportError(f"a body size that is not a number: {text[:40]!r}") from None
    if not 0 <= size <= MAX_BODY_BYTES:
        raise TransportError(f"a body of {size} bytes (at most {MAX_BODY_BYTES})")
    return size


class Pool:
    """At most `connections` kept-alive connections to `base` (http://HOST:PORT); a request
    waits for a free one when all are busy. Use as ``async with Pool(...) as pool``."""

    def __init__(self, base: str, timeout_s: float, connections: int = 512) -> None:
        parts = urlsplit(base)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"expected http://HOST:PORT, not {base!r}")
        self.base = base
        self.host = parts.hostname
        self.port = parts.port or 80
        self.timeout_s = timeout_s
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(connections)
        self._open: set[_Connection] = set()

    async def __aenter__(self) -> Pool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()

    async def get(self, path: str) -> Answer:
        return await self.request("GET", path)

    async def post(self, path: str, body: Any) -> Answer:
        """POST `body` as JSON."""
        return await self.request("POST", path, json.dumps(body).encode())

    async def request(self, method: str, path: str, body: bytes = b"") -> Answer:
        """One request on a free connection (a new one if none is idle), within the timeout
        (the wait for a free connection included)."""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            + (f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body else "")
            + "\r\n"
        ).encode()
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._connection() as connection:
                    return await self._send(connection, head, body)
        except TimeoutError:
            raise Timeout(f"no answer within {self.timeout_s:g} s") from None

    async def _send(self, connection: _Connection, head: bytes, body: bytes) -> Answer:
        try:
            answer, reusable = await connection.request(head, body)
        except OSError as err:
            self._drop(connection)
            raise TransportError(f"{type(err).__name__}: {err}", type(err).__name__) from None
        except BaseException:  # a timeout, a bad answer, a cancellation: never reused
            self._drop(connection)
            raise
        if reusable:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            self._drop(connection)
        return answer

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[_Connection]:
        async with self._slots:
            while self._idle:
                connection = self._idle.pop()  # the most recently used first
                if connection.fresh():
                    yield connection
                    return
                self._drop(connection)
            try:
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, limit=MAX_LINE_BYTES
                )
            except OSError as err:
                raise TransportError(f"{type(err).__name__}: {err}", type(err).__name__) from None
            connection = _Connection(reader, writer)
            self._open.add(connection)
            yield connection

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)


def get(url: str, timeout_s: float) -> Answer:
    """One GET of `url` (http://HOST:PORT/PATH) outside an event loop, on a connection of its
    own: the load test's calls before and after the load (is the service up, which models)."""
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}"
    path = parts.path or "/"

    async def one() -> Answer:
        async with Pool(base, timeout_s, connections=1) as pool:
            return await pool.get(path)

    return asyncio.run(one())
