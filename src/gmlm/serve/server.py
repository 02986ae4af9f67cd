"""Run the service: uvicorn on a socket bound here (so that port 0 can be reported), the models
loaded after the server answers (GET /health at once, GET /ready once they are warm), and a
clean shutdown on SIGTERM or Ctrl-C: uvicorn stops accepting, every accepted request is
answered, then the models are closed and the process exits 0."""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from gmlm.decoding.options import Precision
from gmlm.errors import GmlmError
from gmlm.serve.backends import Backend, load_backend
from gmlm.serve.settings import ServeSettings

# The shipped checkpoints, served when no --model is given (paths from the repository root).
SHIPPED = {
    "padir": "checkpoints/multi30k-de-en/padir",
    "ar": "checkpoints/multi30k-de-en/ar",
}
# Warm-up sentences: each model translates them once per length beam / beam before /ready.
WARMUP = ("Ein Hund rennt über die Wiese.", "Zwei Männer spielen Fußball im Park.")


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
        name, sep, folder = spec.partition("=")
        name = name.strip()
        if not sep or not name or not folder:
            raise GmlmError(f"--model {spec!r}: expected NAME=FOLDER, e.g. padir=runs/padir")
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise GmlmError(f"--model {spec!r}: a name of letters, digits, '-', '_' and '.'")
        if name in models:
            raise GmlmError(f"--model {name}: given twice")
        if not Path(folder).is_dir():
            raise GmlmError(f"--model {name}={folder}: no such folder")
        models[name] = folder
    return models


def warm_up(backends: Mapping[str, Backend]) -> None:
    for backend in backends.values():
        prepared = backend.prepare(list(WARMUP), {}, 0)
        for _ in range(2):
            backend.translate(list(WARMUP), list(range(len(WARMUP))), prepared)


def bind(host: str, port: int) -> socket.socket:
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as err:
        raise GmlmError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.set_inheritable(True)
    return sock


def _server_class() -> type:
    import uvicorn

    class GracefulServer(uvicorn.Server):
        """uvicorn's server, but a SIGTERM after the graceful shutdown ends the process with
        status 0 (a service asked to stop has done its job), not by the signal again."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            if sig == signal.SIGTERM:
                self._captured_signals.remove(sig)

    return GracefulServer


def serve(
    models: Mapping[str, str],
    settings: ServeSettings,
    precision: Precision = "fp32",
    device: str = "cpu",
) -> int:
    """Serve `models` ({name: folder}) until SIGTERM or Ctrl-C; the exit status."""
    import torch
    import uvicorn

    Server = _server_class()

    from gmlm.serve.app import create_app

    settings.validate()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    threads = settings.threads or torch.get_num_threads()
    failure: list[str] = []
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    server: uvicorn.Server | None = None  # set below; `failed` may run before

    def load() -> dict[str, Backend]:
        return {
            name: load_backend(name, folder, precision, threads, device)
            for name, folder in models.items()
        }

    def failed(err: BaseException) -> None:
        failure.append(str(err) if isinstance(err, GmlmError) else f"{type(err).__name__}: {err}")
        if server is not None:
            server.should_exit = True

    def ready(backends: Mapping[str, Backend]) -> None:
        warm_up(backends)
        shown = ", ".join(f"{name} ({b.kind}, {b.source})" for name, b in backends.items())
        print(f"gmlm serve: ready at {url}: {shown}", file=sys.stderr, flush=True)

    app = create_app(load, settings, ready, failed)
    config = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=int(settings.timeout_s) + 5,
        access_log=False,
    )
    server = Server(config)
    print(
        f"gmlm serve: listening on {url} (loading {', '.join(models)}; GET /ready says when "
        f"they are warm; API docs at {url}/docs)",
        file=sys.stderr,
        flush=True,
    )
    server.run(sockets=[sock])
    if failure:
        raise GmlmError(failure[0])
    return 0
