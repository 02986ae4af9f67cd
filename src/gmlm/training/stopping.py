"""Stopping a training run cleanly on SIGTERM or SIGINT (Ctrl-C, `kill PID`).

A signal while the trainer runs is noted, not acted on at once: the trainer finishes the
optimizer step it is in, writes the `last` checkpoint (exact resume, as at any save) and stops
with :class:`gmlm.errors.Stopped`, whose message names the checkpoint and says how to resume.
So a run stopped by a scheduler, a closing session or a user loses no step, where an immediate
exit would lose everything since the last save (up to `save_minutes`). A second signal before
that save stops at once (KeyboardInterrupt): the run then resumes from the previous `last`.
Handlers are installed only in the main thread (Python allows no other) and the previous ones
are put back when training ends.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """Context manager noting SIGTERM/SIGINT; `signum` is the first one received, or None."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # asked twice: stop now, without the save
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""
