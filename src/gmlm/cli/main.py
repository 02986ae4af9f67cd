"""`gmlm` entry point: builds the subcommand parsers and turns user errors into clean messages."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TextIO

from gmlm import __version__
from gmlm.cli import (
    analyze,
    average,
    bench,
    data,
    distill,
    evaluate,
    export,
    loadtest,
    reproduce,
    serve,
    theory,
    throughput,
    train,
    translate,
)
from gmlm.errors import GmlmError, Stopped
from gmlm.locking import outputs_held
from gmlm.signals import handling

PACKAGE = Path(__file__).resolve().parent.parent  # src/gmlm: where gmlm's own warnings come from
SHOW_WARNING = warnings.showwarning  # Python's, for everyone else's warnings

# Each module exposes add_parser(subparsers) and sets `func` on its parser(s).
COMMANDS: tuple[ModuleType, ...] = (
    data,
    train,
    distill,
    translate,
    export,
    average,
    throughput,
    bench,
    evaluate,
    analyze,
    theory,
    reproduce,
    serve,
    loadtest,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gmlm",
        description=(
            "Generative Masked Language Models: PaDIR non-autoregressive translation and "
            "exact computations behind the theory of Li et al. (ICML 2024)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"gmlm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command of `argv`; returns the exit status. A command that ends because of a
    signal (a training stopped on request, a Ctrl-C) leaves the process ignoring SIGINT and
    SIGTERM, so that one more while it exits does not end it with a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        terminated = handling([signal.SIGTERM], _raise_terminated)
        with warnings.catch_warnings(), terminated, outputs_held():
            warnings.showwarning = _show_warning
            status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a closed pipe is caught below, not at exit
        return status
    except Terminated:
        _ignore_stop_signals()
        print("gmlm: stopped by SIGTERM; nothing half-written was kept", file=sys.stderr)
        return 128 + signal.SIGTERM
    except Stopped as err:
        _ignore_stop_signals()
        print(f"gmlm: {err}", file=sys.stderr)
        return err.exit_code
    except GmlmError as err:
        print(f"gmlm: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        _ignore_stop_signals()
        print("gmlm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader stopped early (`gmlm evaluate ... | head -1`): nothing to report. Exit
        # as a process killed by SIGPIPE would (128 + 13), and point stdout at /dev/null so
        # that Python's own flush at exit does not fail again.
        _discard_stdout()
        return 141


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning of gmlm's own (raised in its code) as one `gmlm: warning:` message, as its
    errors are, without Python's source location; others as Python shows them."""
    if Path(filename).resolve().is_relative_to(PACKAGE):
        print(f"gmlm: warning: {message}", file=file or sys.stderr)
    else:
        SHOW_WARNING(message, category, filename, lineno, file, line)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as Ctrl-C raises KeyboardInterrupt: the
    command unwinds the same way (temporary files and folders removed, nothing half-written
    kept). Commands that stop more gracefully (training, reproduce, serve) take SIGTERM over
    while they run."""


def _raise_terminated(_signum: int, _frame: object) -> None:
    """SIGTERM's handler while a command runs (main thread only)."""
    raise Terminated


def _ignore_stop_signals() -> None:
    """The process is on its way out: a further Ctrl-C or SIGTERM would only interrupt its
    exit (Python's clean-up at exit then prints a traceback)."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


def _discard_stdout() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a stream without a descriptor
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
