"""The service's endpoints (see :mod:`gmlm.serve.app` for the list); each reads the app's
:class:`~gmlm.serve.state.AppState`. A translation request is checked and priced
(:func:`admit`) before it is queued, then waited for (:func:`answer`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from gmlm.errors import GmlmError
from gmlm.serve.backends import Prepared, Unavailable, options_json
from gmlm.serve.batcher import Answer, Batcher, DeadlinePassed, Job, QueueFull, Stopping
from gmlm.serve.language import LineWarning, check_text
from gmlm.serve.middleware import RequestLog
from gmlm.serve.problems import Problem
from gmlm.serve.settings import ServeSettings
from gmlm.serve.state import AppState
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


class ClientGone(Exception):
    pass


def app_state(request: Request) -> AppState:
    state = request.app.state.gmlm
    assert isinstance(state, AppState)
    return state


State = Annotated[AppState, Depends(app_state)]
router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "alive"}


@router.get("/ready")
async def ready(state: State) -> JSONResponse:
    if not state.ready:
        return JSONResponse({"status": "loading"}, 503)
    down = state.down()
    if down:
        return JSONResponse({"status": "restarting", "models": down}, 503)
    return JSONResponse({"status": "ready", "models": sorted(state.backends)})


@router.get("/v1/models")
async def models(state: State) -> dict[str, Any]:
    return {
        "models": [
            {
                "name": name,
                "kind": b.kind,
                "source": b.source,
                "languages": b.languages,
                "rescored_by": b.rescored_by,
            }
            for name, b in state.backends.items()
        ]
    }


@router.get("/metrics")
async def prometheus(state: State) -> PlainTextResponse:
    metrics = generate_latest(state.metrics.registry)
    return PlainTextResponse(metrics, media_type=CONTENT_TYPE_LATEST)


@router.post(
    "/v1/translate",
    response_model=TranslateResponse,
    responses={
        413: {"description": "body too large"},
        422: {"description": "a bad request, named"},
        503: {"description": "queue full or not ready (Retry-After)"},
        504: {"description": "deadline passed"},
    },
)
async def translate(body: TranslateRequest, request: Request, state: State) -> TranslateResponse:
    arrived = time.monotonic()
    log: RequestLog | None = getattr(request.state, "log", None)
    if log is not None:
        log.model, log.lines = body.model, len(body.text)
    batcher = state.batchers.get(body.model)
    if not state.ready:
        raise Problem(503, "the models are still loading; see GET /ready", {"Retry-After": "1"})
    if batcher is None:
        served = ", ".join(sorted(state.batchers))
        raise Problem(422, f"model: unknown model {body.model!r}; served: {served}")
    try:
        prepared, flagged, timeout = admit(body, batcher, state)
        job = queue(body, batcher, prepared, timeout)
        answered = await answer(job, request, batcher, timeout)
    except Problem as err:
        state.metrics.requests.labels(body.model, str(err.status_code)).inc()
        raise
    if log is not None:
        log.queue_ms = round(1000 * answered.queue_s, 3)
        log.decode_ms = round(1000 * answered.batch_s, 3)
    total = time.monotonic() - arrived
    state.metrics.requests.labels(body.model, "200").inc()
    state.metrics.latency.labels(body.model).observe(total)
    return respond(body, prepared, flagged, answered, total)


def admit(
    body: TranslateRequest, batcher: Batcher, state: AppState
) -> tuple[Prepared, list[LineWarning], float]:
    """The request checked (lines, characters, settings, rows) and priced against its deadline:
    its prepared decoding, its flagged lines and its timeout; Problem (422) otherwise."""
    settings = state.settings
    check_request(body, settings)
    try:
        prepared = batcher.backend.prepare(body.text, body.options, body.seed)
        languages = batcher.backend.languages
        flagged = check_text(body.text, languages, body.model, body.strict, state.metrics)
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
    return prepared, flagged, timeout


def queue(body: TranslateRequest, batcher: Batcher, prepared: Prepared, timeout: float) -> Job:
    """The request in its model's queue; Problem (503, Retry-After) when the queue is full."""
    try:
        return batcher.submit(body.text, prepared, timeout)
    except QueueFull:
        retry = batcher.retry_after_s()
        raise Problem(
            503,
            f"model {body.model!r} is at capacity ({batcher.queued_sentences} sentences "
            "queued); retry later",
            {"Retry-After": str(retry)},
        ) from None


async def answer(job: Job, request: Request, batcher: Batcher, timeout: float) -> Answer:
    """The job's answer, or the Problem that says why there is none."""
    try:
        return await wait(job.future, request, job.deadline)
    except DeadlinePassed:
        batcher.withdraw(job)
        job.let_go()
        raise Problem(504, f"no translation within the deadline of {timeout:g} s") from None
    except ClientGone:
        batcher.withdraw(job)
        job.let_go()
        raise Problem(499, "the client closed the connection") from None
    except Stopping:
        raise Problem(503, "the service is stopping", {"Retry-After": "1"}) from None
    except Unavailable as err:
        raise Problem(503, str(err), {"Retry-After": "1"}) from None
    except GmlmError as err:
        raise Problem(422, str(err)) from None
    except Exception as err:  # the batch failed: this request fails, the service stays up
        raise Problem(500, f"translation failed: {type(err).__name__}: {err}") from None


def respond(
    body: TranslateRequest,
    prepared: Prepared,
    flagged: list[LineWarning],
    answered: Answer,
    total: float,
) -> TranslateResponse:
    return TranslateResponse(
        model=body.model,
        translations=answered.translations,
        warnings=flagged,
        options=options_json(prepared.options),
        timings={
            "total_ms": round(1000 * total, 3),
            "queue_ms": round(1000 * answered.queue_s, 3),
            "batch_ms": round(1000 * answered.batch_s, 3),
            "batch_sentences": answered.batch_sentences,
            "batch_requests": answered.batch_requests,
        },
    )


async def wait(future: Awaitable[Any], request: Request, deadline: float) -> Any:
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
