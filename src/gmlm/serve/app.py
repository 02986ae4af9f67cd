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
them; :mod:`gmlm.serve.language`). Every answer carries an `X-Request-ID` (the client's, when
valid, else a new one; the request's log line has it) and `X-Gmlm-Replica` (its process).

The parts: :mod:`gmlm.serve.state` (what the app holds), :mod:`gmlm.serve.lifecycle` (start-up,
supervision, shutdown), :mod:`gmlm.serve.routes` (the endpoints), :mod:`gmlm.serve.middleware`
(request ids and log lines, the replica header, the body limit) and
:mod:`gmlm.serve.problems` (the error answers).
"""

from __future__ import annotations

from fastapi import FastAPI

from gmlm import provenance
from gmlm.serve.lifecycle import Load, OnFailure, Warmup, lifespan
from gmlm.serve.middleware import BodyLimit, ReplicaHeader, RequestId
from gmlm.serve.problems import add_handlers
from gmlm.serve.routes import router
from gmlm.serve.settings import ServeSettings
from gmlm.serve.state import AppState


def create_app(
    load: Load,
    settings: ServeSettings,
    warmup: Warmup | None = None,
    on_failure: OnFailure | None = None,
) -> FastAPI:
    """The service. At start-up `load` builds the backends and `warmup` runs them (returning,
    where it measured them, each model's seconds per unit of work: the batcher's first price),
    both off the event loop and after the server answers: until they are done /ready and
    translation requests answer 503. A failure there goes to `on_failure` (the server then
    stops). Each model decodes on a thread of its own."""
    state = AppState(settings)
    app = FastAPI(
        title="gmlm translation service",
        version=provenance.gmlm_version(),
        description="PaDIR and autoregressive translation models behind one HTTP API, with "
        "dynamic batching, bounded queues and Prometheus metrics.",
        lifespan=lifespan(state, load, warmup, on_failure),
    )
    add_handlers(app)
    app.include_router(router)
    app.state.gmlm = state
    app.state.metrics = state.metrics
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(ReplicaHeader)
    app.add_middleware(RequestId)  # outermost: its header is on every answer, 413s included
    return app
