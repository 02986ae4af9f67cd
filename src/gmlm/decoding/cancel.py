"""Stopping a decode between its passes or steps, when whoever asked for it no longer waits.

A service runs each model's batches on a thread of its own; when every request of a running
batch has been answered otherwise (its deadline passed, its client left) or the service is
stopping, the rest of the batch's work is wasted, and on a CPU it holds the cores for up to
minutes. The caller sets a check for the decoding thread with :func:`cancellable`; the
decoders call :func:`checkpoint` between passes (PaDIR), steps (AR) and batches (the
translator), which raises :class:`Cancelled` once the check says so. The check runs on the
host between device work, so it reads no device value (no sync); with no check set,
:func:`checkpoint` costs one attribute read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_local = threading.local()


class Cancelled(Exception):
    """A decode stopped by its thread's cancellation check: nobody waits for its result."""


@contextmanager
def cancellable(check: Callable[[], bool]) -> Iterator[None]:
    """Within the block, this thread's decodes stop at their next pass, step or batch once
    `check()` is true (raising :class:`Cancelled`)."""
    previous = getattr(_local, "check", None)
    _local.check = check
    try:
        yield
    finally:
        _local.check = previous


def checkpoint() -> None:
    """Raise :class:`Cancelled` if this thread's check (see :func:`cancellable`) says so."""
    check = getattr(_local, "check", None)
    if check is not None and check():
        raise Cancelled


__all__ = ["Cancelled", "cancellable", "checkpoint"]
