"""Run the service: uvicorn on a socket bound here (so that port 0 can be reported), the models
loaded after the server answers (GET /health at once, GET /ready once they are warm), and a
clean shutdown on SIGTERM or Ctrl-C: uvicorn stops accepting, every accepted request is
answered, then the models are closed and the process exits 0. What it says goes to the log
(:mod:`gmlm.serve.logs`); a replica's configuration travels as a
:class:`~gmlm.serve.replica.ReplicaSpec`."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from gmlm.decoding.buckets import bucket_sizes
from gmlm.decoding.options import Precision
from gmlm.errors import GmlmError
from gmlm.serve import logs
from gmlm.serve.backends import Backend, graph_captures, load_backend
from gmlm.serve.logs import LOG
from gmlm.serve.replica import ReplicaSpec, from_environment, to_environment
from gmlm.serve.settings import ServeSettings
from gmlm.signals import handling

# The shipped checkpoints, served when no --model is given (paths from the repository root).
SHIPPED = {
    "padir": "checkpoints/multi30k-de-en/padir",
    "ar": "checkpoints/multi30k-de-en/ar",
}
# Warm-up sentences: each model translates them once per length beam / beam before /ready.
WARMUP = ("Ein Hund rennt über die Wiese.", "Zwei Männer spielen Fußball im Park.")
# A model that decodes by CUDA graphs (on a GPU) also translates, before /ready, batches of
# each row bucket up to the largest batch, of sentences of these lengths: so that the shapes
# most batches meet are captured before requests come (a capture costs far more than a replay).
GRAPH_WARMUP = (
    "Ein Hund.",
    "Zwei Männer spielen Fußball im Park.",
    "Eine Gruppe von Menschen steht vor einem großen Gebäude, während ein Mann in einem roten "
    "Hemd auf einer Bank sitzt und eine Zeitung liest.",
)


def parse_models(specs: list[str] | None) -> dict[str, str]:
    """`NAME=FOLDER` specs -> {name: folder}; none: the shipped checkpoints."""
    if not specs:
        missing = [folder for folder in SHIPPED.values() if not Path(folder).is_dir()]
        if missing:
            raise GmlmError(
                f"no --model given and the shipped checkpoints ({', '.join(missing)}) are not "
                "here: run from the repository root, or give --model NAME=FOLDER"
            )
        return dict(SHIPPED)
    models: dict[str, str] = {}
    for spec in specs:
        name, folder = name_and_folder("--model", spec, "padir=runs/padir", models)
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise GmlmError(f"--model {spec!r}: a name of letters, digits, '-', '_' and '.'")
        models[name] = folder
    return models


def parse_rescorers(specs: list[str] | None, models: Mapping[str, str]) -> dict[str, str]:
    """`NAME=FOLDER` specs of --rescore -> {name: folder}: the autoregressive checkpoint in
    FOLDER rescores the candidates of the served PaDIR model NAME."""
    rescorers: dict[str, str] = {}
    for spec in specs or []:
        name, folder = name_and_folder("--rescore", spec, "padir=runs/ar", rescorers)
        if name not in models:
            raise GmlmError(
                f"--rescore {spec!r}: no model {name!r} is served (--model gives "
                f"{', '.join(models)}); NAME is the served PaDIR model to rescore"
            )
        rescorers[name] = folder
    return rescorers


def name_and_folder(
    flag: str, spec: str, example: str, given: Mapping[str, str]
) -> tuple[str, str]:
    """The NAME and FOLDER of `flag`'s `spec`, NAME=FOLDER: a name not in `given` yet, a
    folder that exists; else a GmlmError naming the flag."""
    name, sep, folder = spec.partition("=")
    name = name.strip()
    if not sep or not name or not folder:
        raise GmlmError(f"{flag} {spec!r}: expected NAME=FOLDER, e.g. {example}")
    if name in given:
        raise GmlmError(f"{flag} {name}: given twice")
    if not Path(folder).is_dir():
        raise GmlmError(f"{flag} {name}={folder}: no such folder")
    return name, folder


def warm_up(backends: Mapping[str, Backend], settings: ServeSettings) -> dict[str, float]:
    """Translate WARMUP twice with each model's defaults; each model's seconds per unit of
    work in the second (warm) round, the first price of its requests (gmlm.serve.batcher).
    A model that captures CUDA graphs first captures those of common shapes
    (:func:`capture_common_shapes`)."""
    rates = {}
    for name, backend in backends.items():
        capture_common_shapes(backend, settings)
        prepared = backend.prepare(list(WARMUP), {}, 0)
        for _ in range(2):
            start = time.monotonic()
            backend.translate(list(WARMUP), prepared)
        rates[name] = (time.monotonic() - start) / max(1, prepared.work)
    return rates


def capture_common_shapes(backend: Backend, settings: ServeSettings) -> None:
    """For a model that decodes by CUDA graphs (`graph_captures` not None): translate, for
    every row bucket up to `settings.max_batch_sentences` (gmlm.decoding.buckets), that many
    copies (at most the batch limits) of each GRAPH_WARMUP sentence, capturing the graphs of
    those shapes; logs how many and how long. Nothing for other models."""
    before = graph_captures(backend)
    if before is None:
        return
    started = time.monotonic()
    most = settings.max_batch_sentences
    for size in bucket_sizes(most):
        for sentence in GRAPH_WARMUP:
            texts = [sentence] * min(size, most)
            prepared = backend.prepare(texts, {}, 0)
            if size > 1 and prepared.tokens > settings.max_batch_tokens:
                continue  # a batch the batcher never forms
            backend.translate(texts, prepared)
    after = graph_captures(backend)
    assert after is not None  # a model that decodes by graphs keeps decoding by them
    LOG.info(
        "%s: %d CUDA graphs captured for common shapes in %.1f s",
        backend.name,
        after.graphs - before.graphs,
        time.monotonic() - started,
    )


def bind(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
        # connections whose socket says TCP, and the accepted ones copy this one's protocol.
        # With protocol 0 every answer on a kept-alive connection after the first waited for
        # the client's delayed ACK: about 40 ms added to each (/health included).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # connections wait in the backlog from now on, even before uvicorn runs
    except OSError as err:
        raise GmlmError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def sigterm_ends_cleanly() -> Iterator[None]:
    """Around uvicorn's server: a SIGTERM ends the process with status 0 after the graceful
    shutdown (a service asked to stop has done its job), not by the signal again.

    uvicorn (uvicorn.Server.capture_signals) handles SIGTERM and SIGINT with a graceful
    shutdown, then restores the handlers it found and raises the signals it caught again, so
    that the process ends as it would have without uvicorn. The handler it finds for SIGTERM
    is this one, which does nothing: the signal has been answered by the shutdown. SIGINT
    keeps Python's (KeyboardInterrupt: `gmlm: interrupted`). Signals are the main thread's:
    elsewhere this does nothing."""
    with handling([signal.SIGTERM], _answered):
        yield


def _answered(sig: int, frame: FrameType | None) -> None:
    """SIGTERM's handler once uvicorn has shut down gracefully: nothing left to do."""


def serve(
    models: Mapping[str, str],
    settings: ServeSettings,
    precision: Precision = "fp32",
    device: str = "cpu",
    rescorers: Mapping[str, str] | None = None,
    rescore_weight: float = 1.0,
) -> int:
    """Serve `models` ({name: folder}) until SIGTERM or Ctrl-C, the candidates of each PaDIR
    model named in `rescorers` ({name: AR folder}) rescored with `rescore_weight`; the exit
    status."""
    import uvicorn

    settings.validate()
    rescorers = dict(rescorers or {})
    # Before any replica starts: a bad folder fails once, here.
    kinds = {name: check_model(name, folder) for name, folder in models.items()}
    for name, folder in rescorers.items():
        pair = (kinds[name], check_model(name, folder, "--rescore"))
        if pair != ("padir", "ar"):
            raise GmlmError(
                f"--rescore {name}={folder}: rescores a {pair[0]} model with a {pair[1]} "
                "one; the model rescored must be a PaDIR checkpoint and FOLDER an "
                "autoregressive one"
            )
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    spec = ReplicaSpec(dict(models), settings, precision, device, url, rescorers, rescore_weight)
    logs.configure(settings.log_format)
    LOG.info(
        "listening on %s (%d replica(s), loading %s; GET /ready says when they are warm; API "
        "docs at %s/docs)",
        url,
        settings.workers,
        ", ".join(models),
        url,
    )
    graceful = int(settings.timeout_s) + 5
    if settings.workers > 1:
        from uvicorn.supervisors import Multiprocess

        to_environment(spec)
        config = uvicorn.Config(
            f"{__name__}:app_from_environment",
            factory=True,
            workers=settings.workers,
            log_level="warning",
            log_config=None,  # its records through gmlm's queue to stderr (gmlm.serve.logs)
            access_log=False,
            timeout_graceful_shutdown=graceful,
        )
        Multiprocess(config, sockets=[sock]).run()
        return 0
    failure: list[str] = []
    server = uvicorn.Server(
        uvicorn.Config(
            _app(spec, failure.append, lambda: setattr(server, "should_exit", True)),
            log_level="warning",
            log_config=None,  # its records through gmlm's queue to stderr (gmlm.serve.logs)
            timeout_graceful_shutdown=graceful,
            access_log=False,
        )
    )
    with sigterm_ends_cleanly():
        server.run(sockets=[sock])
    logs.flush()
    if failure:
        raise GmlmError(failure[0])
    return 0


def app_from_environment() -> Any:
    """The app of one replica (uvicorn's factory under --workers): a replica that cannot load
    its models exits with uvicorn's start-up failure status, which stops the supervisor."""
    spec = from_environment()
    logs.configure(spec.settings.log_format)

    def report(message: str) -> None:
        LOG.error("replica %d: %s", os.getpid(), message)

    def stop() -> None:
        logs.flush()
        os._exit(STARTUP_FAILURE)

    return _app(spec, report, stop)


STARTUP_FAILURE = 3  # uvicorn's: a worker that exits with it is not restarted


def _app(spec: ReplicaSpec, report: Callable[[str], None], stop: Callable[[], None]) -> Any:
    import torch

    from gmlm.serve.app import create_app

    settings = spec.settings
    threads = settings.threads or max(1, (os.cpu_count() or 1) // settings.workers)
    torch.set_num_threads(threads)

    def load() -> dict[str, Backend]:
        return {
            name: load_backend(
                name, folder, spec.precision, threads, spec.device, spec.rescore(name)
            )
            for name, folder in spec.models.items()
        }

    def ready(backends: Mapping[str, Backend]) -> dict[str, float]:
        rates = warm_up(backends, settings)
        shown = ", ".join(
            f"{name} ({b.kind}, {b.source}"
            + (f", rescored by {b.rescored_by})" if b.rescored_by else ")")
            for name, b in backends.items()
        )
        replica = f" (replica {os.getpid()})" if settings.workers > 1 else ""
        LOG.info("ready at %s%s: %s", spec.url, replica, shown)
        return rates

    def failed(err: BaseException) -> None:
        report(str(err) if isinstance(err, GmlmError) else f"{type(err).__name__}: {err}")
        stop()

    return create_app(load, settings, ready, failed)


def check_model(name: str, folder: str, flag: str = "--model") -> str:
    """Fail now on a folder that is neither a CTranslate2 export nor a gmlm checkpoint (given
    as `flag` NAME=FOLDER); its kind ("ar", "padir" or "ctranslate2")."""
    from gmlm.checkpoint.config import read_checkpoint_config
    from gmlm.checkpoint.loading import resolve_checkpoint
    from gmlm.serve.backends import is_ctranslate2_export

    if is_ctranslate2_export(folder):
        return "ctranslate2"
    try:
        return read_checkpoint_config(resolve_checkpoint(folder)).kind
    except GmlmError as err:
        raise GmlmError(f"{flag} {name}={folder}: {err}") from None
