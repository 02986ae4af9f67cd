"""Stopping a training run cleanly on SIGTERM or SIGINT (Ctrl-C, `kill PID`).

A signal while the trainer runs is noted, not acted on at once: the trainer finishes the
optimizer step it is in, writes the `last` checkpoint (exact resume, as at any save) and stops
with :class:`gmlm.errors.Stopped`, whose message names the checkpoint and says how to resume.
So a run stopped by a scheduler, a closing session or a user loses no step, where an immediate
exit would lose everything since the last save (up to `save_minutes`). The first signal says
so on stderr at once. Later ones (people press Ctrl-C several times when nothing seems to
happen) change nothing: each says again that the run is stopping and how to stop it at once
(`kill -9`, losing the steps since the previous save); an exception raised in the middle of
the save would lose the step it saves, and one raised after it a traceback.
Handlers are installed only in the main thread (Python allows no other) and the previous ones
are put back when training ends; `gmlm`'s entry point ignores further signals while it exits
(:func:`gmlm.cli.main.main`).
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType, TracebackType

from gmlm.signals import handling

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """Context manager noting SIGTERM/SIGINT; `signum` is the first one received, or None."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._handling = contextlib.ExitStack()

    def __enter__(self) -> StopRequests:
        self._handling.enter_context(handling(SIGNALS, self._note))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._handling.close()

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            said = f"{name}: stopping after the step in progress, once `last` is saved"
        else:
            said = f"{name} again: already stopping, once `last` is saved; please wait"
        _say(
            f"gmlm: {said} (to stop at once, losing the steps since the previous save: "
            f"kill -9 {os.getpid()})\n"
        )

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""


def _say(text: str) -> None:
    """Write to file descriptor 2 (stderr) directly: a handler may run while the main thread
    is inside a write to sys.stderr (a progress bar), which a buffered write would break."""
    with contextlib.suppress(OSError):  # stderr closed: the message is lost, the stop goes on
        os.write(2, text.encode("utf-8", "replace"))
