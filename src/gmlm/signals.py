"""The main thread's signal handlers, set for the length of a block: what every command that
takes a signal over while it runs does (the command line's SIGTERM, training's stop requests,
the service's graceful shutdown)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any]


@contextlib.contextmanager
def handling(signals: Sequence[signal.Signals], handler: Handler) -> Iterator[None]:
    """`handler` for each of `signals` while the block runs, the handlers found before after
    it. Signals are the main thread's: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, found in previous.items():
            signal.signal(sig, found)
