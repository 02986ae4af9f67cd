"""The service's log (logger ``gmlm.serve``, on stderr): start-up, warm-up, restarts, shutdown,
and one line per HTTP request with its id, model, lines, queue and decode milliseconds and
status (the health, readiness and metrics probes at DEBUG, the others at INFO).

Two formats (``gmlm serve --log-format``): ``text``, a readable line (``gmlm serve: ...``,
with the request's fields as ``key=value``), and ``json``, one JSON object per line for a log
collector. A record's structured fields travel in ``extra={"fields": {...}}``.

Every line the process logs reaches stderr through one bounded queue and a writer thread of
its own, on the root logger: the service's lines, and those of uvicorn (run without its own
logging config), asyncio and Python warnings (:func:`logging.captureWarnings`), which would
otherwise write to stderr from whichever thread raised them, the event loop included. So the
event loop never waits for stderr: a service whose stderr nobody reads (a pipe never drained)
keeps answering, and drops log lines once the queue is full (counted in the handler's
`dropped`, and in the metric ``gmlm_log_lines_dropped_total``: :func:`dropped_lines`).
"""

from __future__ import annotations

import datetime
import json
import logging
import queue
import sys
import threading
import time
from typing import Any, Literal, TextIO

LOG = logging.getLogger("gmlm.serve")
ROOT = logging.getLogger()

LogFormat = Literal["text", "json"]

# Lines that may wait for stderr before new ones are dropped.
QUEUE_LINES = 10_000
# How long stopping waits for queued lines to reach stderr (seconds).
FLUSH_S = 2.0
# Lines dropped by handlers that configure() has since replaced.
_dropped_before = 0


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


class TextFormatter(logging.Formatter):
    """``gmlm serve: [warning: |error: ][[LOGGER] ]MESSAGE key=value ...`` (None shown as
    ``-``; LOGGER for another logger than the service's, as uvicorn's or asyncio's)."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno < logging.WARNING else f"{record.levelname.lower()}: "
        origin = "" if record.name.startswith(LOG.name) else f"[{record.name}] "
        parts = [f"gmlm serve: {level}{origin}{record.getMessage()}"]
        parts += [f"{k}={'-' if v is None else v}" for k, v in fields_of(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the fields."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
        line: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **fields_of(record),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def formatter(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


class BackgroundHandler(logging.Handler):
    """Formats on the caller's thread, writes on a daemon thread of its own (see the module's
    docstring); :meth:`flush` waits at most FLUSH_S for the queued lines."""

    def __init__(self, stream: TextIO, capacity: int = QUEUE_LINES) -> None:
        super().__init__()
        self.stream = stream
        self.lines: queue.Queue[str] = queue.Queue(capacity)
        self.dropped = 0
        self.writer = threading.Thread(target=self._write, name="gmlm-log", daemon=True)
        self.writer.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        try:
            self.lines.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def _write(self) -> None:
        while True:
            line = self.lines.get()
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # stderr closed: nothing left to tell
                pass
            finally:
                self.lines.task_done()

    def flush(self, timeout: float = FLUSH_S) -> None:
        deadline = time.monotonic() + timeout
        while self.lines.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)


def configure(log_format: LogFormat = "text", stream: TextIO | None = None) -> logging.Handler:
    """Send the process's log records to `stream` (stderr) in `log_format`: ``gmlm.serve``'s
    of INFO and above, the others' (uvicorn, asyncio, Python warnings) of WARNING and above,
    all through one BackgroundHandler on the root logger, replacing a handler an earlier call
    installed (a replica configures itself again)."""
    global _dropped_before
    for old in [h for h in ROOT.handlers if isinstance(h, BackgroundHandler)]:
        old.flush()
        ROOT.removeHandler(old)
        _dropped_before += old.dropped
    handler = BackgroundHandler(stream or sys.stderr)
    handler.setFormatter(formatter(log_format))
    ROOT.addHandler(handler)
    LOG.setLevel(logging.INFO)
    logging.captureWarnings(True)
    return handler


def dropped_lines() -> int:
    """Log lines dropped so far in this process by every handler :func:`configure` installed
    (a replaced handler's drops included)."""
    return _dropped_before + sum(
        h.dropped for h in ROOT.handlers if isinstance(h, BackgroundHandler)
    )


def flush() -> None:
    """Wait (bounded) for the queued lines to reach stderr; before the process exits on its own
    (``os._exit``) or prints after them."""
    for handler in ROOT.handlers:
        if isinstance(handler, BackgroundHandler):
            handler.flush()
