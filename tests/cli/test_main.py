"""How the command line speaks and ends: a warning from gmlm's own code reaches the terminal
as one `gmlm: warning:` line, as its errors do (no Python source location), anyone else's
goes where Python sends it; SIGTERM unwinds a command as Ctrl-C does."""

from __future__ import annotations

import argparse
import os
import signal
import time
import warnings
from pathlib import Path

import pytest

from gmlm.cli import evaluate
from gmlm.cli.main import PACKAGE, main
from gmlm.io import atomic_open


def test_gmlm_warnings_are_one_line_and_others_stay_as_python_shows_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(_args: argparse.Namespace) -> int:
        inside = str(PACKAGE / "bench" / "timing.py")
        warnings.warn_explicit("3 lines look like English", UserWarning, inside, 108)
        warnings.warn_explicit("deprecated thing", DeprecationWarning, "/elsewhere/lib.py", 7)
        return 0

    monkeypatch.setattr(evaluate, "run", run)
    with pytest.warns(DeprecationWarning, match="deprecated thing") as caught:
        assert main(["evaluate", "--hyp", "h", "--ref", "r"]) == 0
    assert [str(w.message) for w in caught] == ["deprecated thing"]  # Python's way: recorded here
    assert capsys.readouterr().err == "gmlm: warning: 3 lines look like English\n"


def test_sigterm_unwinds_a_command_as_ctrl_c_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command without a stop of its own (translate, data prepare, export, ...) killed by
    SIGTERM mid-write: one line, status 143, and no file under the final name or beside it;
    the handler in place before is back afterwards."""
    out = tmp_path / "out.txt"

    def run(_args: argparse.Namespace) -> int:
        with atomic_open(out) as handle:
            handle.write("half of it")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the signal ends this
        return 0

    monkeypatch.setattr(evaluate, "run", run)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        assert main(["evaluate", "--hyp", "h", "--ref", "r"]) == 128 + signal.SIGTERM
        assert capsys.readouterr().err == (
            "gmlm: stopped by SIGTERM; nothing half-written was kept\n"
        )
        assert list(tmp_path.iterdir()) == []
    finally:  # main ignores further stop signals on its way out: as a process would end
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        signal.signal(signal.SIGTERM, before[0])
        signal.signal(signal.SIGINT, before[1])
