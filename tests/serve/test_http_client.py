"""The load test's HTTP client against scripted servers: each way an answer can be framed,
each way it can fail, the pool's bound and its reuse of connections (no torch, no service)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from gmlm.serve import http_client
from gmlm.serve.http_client import Pool, Timeout, TransportError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's head and body (by its Content-Length); b"" at the end of the stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return b""
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


class Server:
    """A loopback server running `answer` for each request; counts connections."""

    def __init__(self, answer: Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]) -> None:
        self.answer = answer
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            while request := await read_request(reader):
                self.requests.append(request)
                if not await self.answer(request, writer):
                    break
        finally:
            self.open -= 1
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()


def ok(body: bytes = b'{"a": 1}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def keep(request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(ok())
    await writer.drain()
    return True


def run(coroutine: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coroutine, 30))  # type: ignore[arg-type]


def test_a_kept_alive_connection_serves_request_after_request():
    async def main() -> None:
        server = Server(keep)
        async with server as url, Pool(url, timeout_s=10) as pool:
            for _ in range(5):
                answer = await pool.post("/v1/translate", {"text": ["ein Hund"]})
                assert (answer.status_code, answer.json()) == (200, {"a": 1})
            assert (await pool.get("/health")).text == '{"a": 1}'
            (connection,) = pool._open
        assert server.connections == 1
        assert connection.writer.is_closing()  # closed with the pool
        first = server.requests[0]
        assert first.startswith(b"POST /v1/translate HTTP/1.1\r\n")
        assert first.endswith(b'\r\n\r\n{"text": ["ein Hund"]}')
        assert b"Content-Type: application/json" in first
        assert server.requests[-1].startswith(b"GET /health HTTP/1.1\r\n")

    run(main())


@pytest.mark.parametrize(
    ("answer", "body", "reused"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nTrailer: x\r\n\r\n",
            b"abcdefg",
            True,
        ),
        (ok(b"bye", b"Connection: close\r\n"), b"bye", False),
        (b"HTTP/1.0 503 Busy\r\nRetry-After: 1\r\n\r\nto the end", b"to the end", False),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b"", True),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", b"", True),
        (b"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok", b"ok", True),
    ],
    ids=["chunked", "connection-close", "until-closed", "no-content", "not-modified", "no-reason"],
)
def test_every_framing_of_an_answer(answer, body, reused):
    async def main() -> None:
        async def reply(request: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(answer)
            await writer.drain()
            return reused

        server = Server(reply)
        async with server as url, Pool(url, timeout_s=10) as pool:
            for _ in range(2):
                got = await pool.get("/x")
                assert got.body == body
            assert len(pool._open) == len(pool._idle) == (1 if reused else 0)
        assert server.connections == (1 if reused else 2)

    run(main())


@pytest.mark.parametrize(
    ("answer", "kind", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "closed early", "closed before"),
        (b"HTTP/1.1 200 OK\r\nContent-Le", "closed early", "closed before"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "bad answer", "not an HTTP answer"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n", "bad answer", "not a number"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n", "bad answer", "at most 100"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n",
            "bad answer",
            "at most 100",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n"
            + b"z" * 64
            + b"\r\n40\r\n",
            "bad answer",
            "over 100",
        ),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 101, "bad answer", "over 100"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 200 + b"\r\n\r\n", "bad answer", "a line over 128"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 101 + b"\r\n", "bad answer", "more than 100"),
    ],
    ids=[
        "short-body",
        "short-head",
        "not-http",
        "bad-length",
        "long-body",
        "long-chunk",
        "long-chunks",
        "long-unframed",
        "long-line",
        "many-headers",
    ],
)
def test_a_broken_answer_is_a_transport_error_and_its_connection_is_dropped(
    monkeypatch, answer, kind, message
):
    monkeypatch.setattr(http_client, "MAX_BODY_BYTES", 100)
    monkeypatch.setattr(http_client, "MAX_HEADERS", 100)
    monkeypatch.setattr(http_client, "MAX_LINE_BYTES", 128)

    async def main() -> None:
        async def reply(request: bytes, writer: asyncio.StreamWriter) -> bool:
            if len(server.requests) > 1:  # the next connection answers well
                return await keep(request, writer)
            writer.write(answer)
            await writer.drain()
            return False  # and closes

        server = Server(reply)
        async with server as url, Pool(url, timeout_s=10) as pool:
            with pytest.raises(TransportError, match=message) as caught:
                await pool.get("/x")
            assert caught.value.kind == kind
            assert not pool._open and not pool._idle  # dropped
            assert (await pool.get("/x")).status_code == 200
        assert server.connections == 2

    run(main())


def test_no_answer_in_time_is_a_timeout_and_the_connection_is_not_reused():
    async def main() -> None:
        release = asyncio.Event()

        async def slow_once(request: bytes, writer: asyncio.StreamWriter) -> bool:
            if len(server.requests) == 1:
                await release.wait()
                return False
            return await keep(request, writer)

        server = Server(slow_once)
        async with server as url, Pool(url, timeout_s=0.2) as pool:
            with pytest.raises(Timeout, match=r"no answer within 0\.2 s") as caught:
                await pool.get("/x")
            assert caught.value.kind == "timeout"
            assert not pool._open and not pool._idle  # dropped
            release.set()
            assert (await pool.get("/x")).status_code == 200
        assert server.connections == 2

    run(main())


def test_nobody_listening_is_a_transport_error_named_by_its_cause():
    async def main() -> None:
        probe = await asyncio.start_server(keep, "127.0.0.1", 0)  # a free port, then closed
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        async with Pool(f"http://127.0.0.1:{port}", timeout_s=5) as pool:
            with pytest.raises(TransportError) as caught:
                await pool.get("/x")
        assert caught.value.kind == "ConnectionRefusedError"

    run(main())


def test_the_pool_opens_at_most_its_connections_and_the_rest_wait():
    async def main() -> None:
        async def slow(request: bytes, writer: asyncio.StreamWriter) -> bool:
            await asyncio.sleep(0.05)
            return await keep(request, writer)

        server = Server(slow)
        async with server as url, Pool(url, timeout_s=10, connections=2) as pool:
            answers = await asyncio.gather(*(pool.get("/x") for _ in range(8)))
        assert [a.status_code for a in answers] == [200] * 8
        assert server.most_open <= 2 and server.connections == 2

    run(main())


def test_a_connection_the_server_closed_or_left_idle_too_long_is_not_used(monkeypatch):
    """A server closes idle kept-alive connections (uvicorn after 5 s): a request written to
    one would meet the close. The pool opens a new connection instead, for one the server has
    closed and for one idle longer than IDLE_S."""

    async def main() -> None:
        async def answer_then_close(request: bytes, writer: asyncio.StreamWriter) -> bool:
            await keep(request, writer)  # no "Connection: close": it looks reusable
            return False

        server = Server(answer_then_close)
        async with server as url, Pool(url, timeout_s=10) as pool:
            await pool.get("/x")
            (idle,) = pool._idle
            for _ in range(500):  # until the client has seen the server's close
                if idle.reader.at_eof():
                    break
                await asyncio.sleep(0.01)
            assert (await pool.get("/x")).status_code == 200
            assert idle.writer.is_closing() and idle not in pool._open and len(pool._open) == 1
        assert server.connections == 2

        monkeypatch.setattr(http_client, "IDLE_S", 0.0)
        server = Server(keep)
        async with server as url, Pool(url, timeout_s=10) as pool:
            for _ in range(3):
                assert (await pool.get("/x")).status_code == 200
        assert server.connections == 3

    run(main())


def test_only_plain_http_urls():
    with pytest.raises(ValueError, match="expected http://HOST:PORT"):
        Pool("https://127.0.0.1:1", timeout_s=1)


def test_a_body_of_exactly_the_limit_is_read(monkeypatch):
    monkeypatch.setattr(http_client, "MAX_BODY_BYTES", 100)
    answers = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + b"32\r\n"
        + b"a" * 50
        + b"\r\n32\r\n"
        + b"b" * 50
        + b"\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n" + b"c" * 100,
    ]
    monkeypatch.setattr(http_client, "READ_BYTES", 7)  # a body read in many pieces

    async def main() -> None:
        async def reply(request: bytes, writer: asyncio.StreamWriter) -> bool:
            writer.write(answers[len(server.requests) - 1])
            await writer.drain()
            return False

        server = Server(reply)
        async with server as url, Pool(url, timeout_s=10) as pool:
            assert (await pool.get("/x")).body == b"a" * 50 + b"b" * 50
            assert (await pool.get("/x")).body == b"c" * 100

    run(main())
