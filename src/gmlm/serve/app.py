"""The HTTP interface of `gmlm serve` (FastAPI on uvicorn; why these, docs/DESIGN.md).

    POST /v1/translate  {"model": "padir", "text": ["Ein Hund rennt."], "options": {"steps": 4}}
                        -> {"model", "translations", "warnings", "options", "timings"}
    GET  /health        alive (200 as soon as the process answers)
    GET  /ready         200 once every model is loaded and warmed up, else 503
    GET  /v1/models     the models served, their kinds, folders and language pairs
    GET  /metrics       Prometheus text format
    GET  /docs          the OpenAPI page (/openapi.json its schema)

A request is bounded before it costs anything: its body size (413), its lines and characters,
its decoding settings (the names and ranges of `gmlm translate`'s options), each line's tokens
against the model's maximum and the decoder rows it asks for (422, naming the problem). A full
queue answers 503 with Retry-After at once, a passed deadline 504; a client that disconnects
takes its queued work with it. Lines with no letters, or confidently in another language than
the model's source language, come back as `warnings` (with `"strict": true`, a 422 naming
them; :mod:`gmlm.serve.language`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gmlm import provenance
from gmlm.errors import GmlmError
from gmlm.serve.backends import Backend, Supervised, Unavailable, options_json
from gmlm.serve.batcher import Batcher, DeadlinePassed, QueueFull, Stopping
from gmlm.serve.language import LineWarning, check_text
from gmlm.serve.metrics import Metrics
from gmlm.serve.settings import ServeSettings
from gmlm.translation.language_settings import STRICT_HELP


class TranslateRequest(BaseModel):
    """A translation request; unknown fields are an error (a misspelt setting must not be
    ignored)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="the name of a served model (GET /v1/models)")
    text: list[str] = Field(description="sentences, one per item; an empty one stays empty")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="decoding settings by `gmlm translate`'s option names, e.g. "
        '{"steps": 10} for PaDIR or {"beam": 5} for AR; the model\'s defaults otherwise',
    )
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="PaDIR's random tokens")
    timeout_s: float | None = Field(
        default=None, gt=0, description="a deadline shorter than the service's"
    )
    strict: bool = Field(default=False, description=STRICT_HELP + " (422)")


class TranslateResponse(BaseModel):
    model: str
    translations: list[str]
    warnings: list[LineWarning] = Field(
        default_factory=list,
        description="the lines the input language check flagged, one entry each (none for a "
        "model whose languages are not known)",
    )
    options: dict[str, Any]
    timings: dict[str, float | int]


class Problem(HTTPException):
    """An answer other than 200, with a message that names the problem. An HTTPException, so
    that FastAPI passes it on untouched while it reads the body (BodyLimit raises it there)."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        super().__init__(status, detail, headers)


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
        too_big = JSONResponse(
            {"detail": f"request body over {self.limit} bytes (--max-body-bytes)"}, 413
        )
        if length is not None and length.isdigit() and int(length) > self.limit:
            await too_big(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise Problem(413, f"request body over {self.limit} bytes (--max-body-bytes)")
            return message

        await self.app(scope, limited, send)


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


def create_app(
    load: Callable[[], Mapping[str, Backend]],
    settings: ServeSettings,
    warmup: Callable[[Mapping[str, Backend]], Mapping[str, float]] | None = None,
    on_failure: Callable[[BaseException], None] | None = None,
) -> FastAPI:
    """The service. At start-up `load` builds the backends and `warmup` runs them (returning,
    where it measured them, each model's seconds per unit of work: the batcher's first price),
    both off the event loop and after the server answers: until they are done /ready and
    translation requests answer 503. A failure there goes to `on_failure` (the server then
    stops). Each model decodes on a thread of its own."""
    metrics = Metrics()
    state: dict[str, Any] = {"ready": False, "backends": {}, "batchers": {}, "tasks": []}
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gmlm-load")
    decoders: dict[str, ThreadPoolExecutor] = {}

    async def start() -> None:
        loop = asyncio.get_running_loop()
        try:
            backends = await loop.run_in_executor(executor, load)
            state["backends"] = backends
            rates: Mapping[str, float] = {}
            if warmup is not None:
                rates = await loop.run_in_executor(executor, warmup, backends)
        except Exception as err:
            if on_failure is None:
                raise
            on_failure(err)
            return
        for name in backends:
            decoders[name] = ThreadPoolExecutor(1, thread_name_prefix=f"gmlm-decode-{name}")
        batchers = {
            name: Batcher(backend, settings, metrics, decoders[name], rates.get(name, 0.0))
            for name, backend in backends.items()
        }
        state["tasks"] += [
            asyncio.create_task(b.run(), name=f"batcher-{n}") for n, b in batchers.items()
        ]
        state["tasks"].append(asyncio.create_task(supervise(backends), name="gmlm-supervise"))
        state.update(batchers=batchers, ready=True)

    async def supervise(backends: Mapping[str, Backend]) -> None:
        """Restart a backend's worker process that has died (killed by the OOM killer, say),
        off the event loop; /ready says 503 until it is back."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SUPERVISE_S)
            for name, backend in backends.items():
                if isinstance(backend, Supervised) and not backend.alive():
                    metrics.restarts.labels(name).inc()
                    with contextlib.suppress(Exception):  # tried again next round
                        await loop.run_in_executor(executor, backend.revive)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        starting = asyncio.create_task(start(), name="gmlm-start")
        try:
            yield
        finally:
            state["ready"] = False
            for batcher in state["batchers"].values():
                batcher.stopping = True  # a running batch stops at its next pass or step
            with contextlib.suppress(Exception):
                await starting
            for task in state["tasks"]:
                task.cancel()
            for task in state["tasks"]:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for pool in (*decoders.values(), executor):
                pool.shutdown(wait=True)  # a running batch ends at its next pass or step
            for backend in state["backends"].values():
                backend.close()

    app = FastAPI(
        title="gmlm translation service",
        version=provenance.gmlm_version(),
        description="PaDIR and autoregressive translation models behind one HTTP API, with "
        "dynamic batching, bounded queues and Prometheus metrics.",
        lifespan=lifespan,
    )

    @app.exception_handler(StarletteHTTPException)
    async def problem(_: Request, err: StarletteHTTPException) -> JSONResponse:
        detail = err.detail
        cause = err.__cause__
        if isinstance(cause, UnicodeDecodeError):  # FastAPI's "error parsing the body"
            detail = f"the body is not UTF-8 JSON ({cause.reason} at byte {cause.start})"
        return JSONResponse({"detail": _printable(detail)}, err.status_code, headers=err.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        parts = []
        for e in err.errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        return JSONResponse({"detail": _printable("; ".join(parts) or "invalid request")}, 422)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "alive"}

    @app.get("/ready")
    async def ready() -> JSONResponse:
        if not state["ready"]:
            return JSONResponse({"status": "loading"}, 503)
        down = sorted(n for n, b in state["backends"].items() if not _alive(b))
        if down:
            return JSONResponse({"status": "restarting", "models": down}, 503)
        return JSONResponse({"status": "ready", "models": sorted(state["backends"])})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "models": [
                {"name": name, "kind": b.kind, "source": b.source, "languages": b.languages}
                for name, b in state["backends"].items()
            ]
        }

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/v1/translate",
        response_model=TranslateResponse,
        responses={
            413: {"description": "body too large"},
            422: {"description": "a bad request, named"},
            503: {"description": "queue full or not ready (Retry-After)"},
            504: {"description": "deadline passed"},
        },
    )
    async def translate(body: TranslateRequest, request: Request) -> TranslateResponse:
        arrived = time.monotonic()
        name = body.model
        batcher = state["batchers"].get(name)
        if not state["ready"]:
            raise Problem(503, "the models are still loading; see GET /ready", {"Retry-After": "1"})
        if batcher is None:
            served = ", ".join(sorted(state["batchers"]))
            raise Problem(422, f"model: unknown model {name!r}; served: {served}")
        try:
            return await _translate(body, request, batcher, arrived)
        except Problem as err:
            metrics.requests.labels(name, str(err.status_code)).inc()
            raise

    async def _translate(
        body: TranslateRequest, request: Request, batcher: Batcher, arrived: float
    ) -> TranslateResponse:
        check_request(body, settings)
        try:
            prepared = batcher.backend.prepare(body.text, body.options, body.seed)
            backend = batcher.backend
            flagged = check_text(body.text, backend.languages, body.model, body.strict, metrics)
        except GmlmError as err:
            raise Problem(422, str(err)) from None
        if prepared.rows > settings.max_rows:
            raise Problem(
                422,
                f"the request asks for {prepared.rows} decoder rows (lines x beams or "
                f"candidates), more than --max-rows {settings.max_rows}; send fewer lines or "
                "a smaller beam",
            )
        timeout = min(body.timeout_s or settings.timeout_s, settings.timeout_s)
        price = batcher.price_s(prepared)
        if price > timeout:
            raise Problem(
                422,
                f"the request would take about {price:.1f} s alone at this model's recent rate "
                f"({prepared.work:,} decoder row-positions over its passes or steps), more "
                f"than its deadline of {timeout:g} s; send fewer lines or smaller settings "
                "(steps, length_beam, random_starts, beam)",
            )
        try:
            job = batcher.submit(body.text, prepared, timeout)
        except QueueFull:
            retry = batcher.retry_after_s()
            raise Problem(
                503,
                f"model {body.model!r} is at capacity ({batcher.queued_sentences} sentences "
                "queued); retry later",
                {"Retry-After": str(retry)},
            ) from None
        try:
            answer = await _wait(job.future, request, job.deadline)
        except DeadlinePassed:
            batcher.withdraw(job)
            job.abandoned = True  # a running batch stops once none of its requests waits
            raise Problem(504, f"no translation within the deadline of {timeout:g} s") from None
        except ClientGone:
            batcher.withdraw(job)
            job.abandoned = True
            job.future.cancel()
            raise Problem(499, "the client closed the connection") from None
        except Stopping:
            raise Problem(503, "the service is stopping", {"Retry-After": "1"}) from None
        except Unavailable as err:
            raise Problem(503, str(err), {"Retry-After": "1"}) from None
        except GmlmError as err:
            raise Problem(422, str(err)) from None
        except Exception as err:  # the batch failed: this request fails, the service stays up
            raise Problem(500, f"translation failed: {type(err).__name__}: {err}") from None
        total = time.monotonic() - arrived
        metrics.requests.labels(body.model, "200").inc()
        metrics.latency.labels(body.model).observe(total)
        return TranslateResponse(
            model=body.model,
            translations=answer.translations,
            warnings=flagged,
            options=options_json(prepared.options),
            timings={
                "total_ms": round(1000 * total, 3),
                "queue_ms": round(1000 * answer.queue_s, 3),
                "batch_ms": round(1000 * answer.batch_s, 3),
                "batch_sentences": answer.batch_sentences,
                "batch_requests": answer.batch_requests,
            },
        )

    app.state.gmlm = state
    app.state.metrics = metrics
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(ReplicaHeader)
    return app


class ClientGone(Exception):
    pass


# How often the service looks for dead worker processes to restart (seconds).
SUPERVISE_S = 0.5


def _printable(detail: Any) -> Any:
    """A message that echoes what a client sent, made encodable: a lone surrogate (valid in
    JSON's escapes, not in UTF-8) becomes its backslash escape instead of failing the answer."""
    if isinstance(detail, str):
        return detail.encode("utf-8", "backslashreplace").decode("utf-8")
    return detail


def _alive(backend: Backend) -> bool:
    return not isinstance(backend, Supervised) or backend.alive()


async def _wait(future: Awaitable[Any], request: Request, deadline: float) -> Any:
    """The job's answer; DeadlinePassed at the deadline, ClientGone if the client leaves."""
    task = asyncio.ensure_future(future)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlinePassed
        done, _ = await asyncio.wait({task}, timeout=min(left, 0.05))
        if done:
            return task.result()
        if await request.is_disconnected():
            raise ClientGone


def check_request(body: TranslateRequest, settings: ServeSettings) -> None:
    if not body.text:
        raise Problem(422, "text: give at least one sentence")
    if len(body.text) > settings.max_lines:
        raise Problem(
            422, f"text: {len(body.text)} lines, more than --max-lines {settings.max_lines}"
        )
    for i, line in enumerate(body.text):
        if len(line) > settings.max_chars:
            raise Problem(
                422,
                f"text[{i}]: {len(line)} characters, more than --max-chars {settings.max_chars}",
            )
