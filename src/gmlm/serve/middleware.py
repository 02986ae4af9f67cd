"""The service's ASGI middleware, outermost first: :class:`RequestId` (every answer carries an
``X-Request-ID``, and every request gets one log line), :class:`ReplicaHeader` (every answer
names its process) and :class:`BodyLimit` (413 for a body over ``--max-body-bytes``)."""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass

from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gmlm.serve.logs import LOG
from gmlm.serve.problems import Problem

REQUEST_ID_HEADER = b"x-request-id"
# The longest request id taken from a client (longer ones are replaced by a generated one).
MAX_REQUEST_ID = 128
# Requests logged at DEBUG: the probes a load balancer or a scraper sends every few seconds.
PROBES = frozenset({"/health", "/ready", "/metrics"})


def valid_request_id(value: bytes | None) -> str | None:
    """A client's request id, if usable: 1 to MAX_REQUEST_ID printable ASCII characters, no
    spaces (it goes into log lines and a response header as it is)."""
    if value is None or not 0 < len(value) <= MAX_REQUEST_ID:
        return None
    if not all(0x21 <= byte <= 0x7E for byte in value):
        return None
    return value.decode("ascii")


def new_request_id() -> str:
    return uuid.uuid4().hex


@dataclass
class RequestLog:
    """What a request's log line says; the middleware fills the id, path and status, the
    translate route what it learns (``request.state.log``)."""

    request_id: str
    model: str | None = None
    lines: int | None = None
    queue_ms: float | None = None
    decode_ms: float | None = None

    def fields(self, status: int | None, total_ms: float) -> dict[str, object]:
        return {
            "request_id": self.request_id,
            "model": self.model,
            "lines": self.lines,
            "queue_ms": self.queue_ms,
            "decode_ms": self.decode_ms,
            "status": status,
            "total_ms": round(total_ms, 3),
        }


class RequestId:
    """ASGI middleware: the request's id (the client's valid ``X-Request-ID``, else a new
    uuid4 hex) in ``request.state.log`` and in the ``X-Request-ID`` header of its answer, and
    one log line per request once answered. An exception nothing answered becomes the 500
    Starlette would give, with the header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.monotonic()
        headers = dict(scope.get("headers") or [])
        record = RequestLog(valid_request_id(headers.get(REQUEST_ID_HEADER)) or new_request_id())
        scope.setdefault("state", {})["log"] = record
        header = (REQUEST_ID_HEADER, record.request_id.encode("ascii"))
        status: int | None = None

        async def tagged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        except Exception:
            if status is None:
                await PlainTextResponse("Internal Server Error", 500)(scope, receive, tagged)
            raise
        finally:
            path = scope.get("path")
            level = logging.DEBUG if path in PROBES else logging.INFO
            fields = record.fields(status, 1000 * (time.monotonic() - began))
            LOG.log(level, "%s %s", scope.get("method"), path, extra={"fields": fields})


class ReplicaHeader:
    """ASGI middleware: every answer names the process that gave it (X-Gmlm-Replica: its PID),
    so that a client or a test can tell replicas apart (--workers)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.header = (b"x-gmlm-replica", str(os.getpid()).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, named if scope["type"] == "http" else send)


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 before it is read
    whole (by its Content-Length, or as it streams in)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        message = f"request body over {self.limit} bytes (--max-body-bytes)"
        if length is not None and length.isdigit() and int(length) > self.limit:
            await JSONResponse({"detail": message}, 413)(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            received = await receive()
            if received["type"] == "http.request":
                seen += len(received.get("body", b""))
                if seen > self.limit:
                    raise Problem(413, message)
            return received

        await self.app(scope, limited, send)
