"""A warning from gmlm's own code reaches the terminal as one `gmlm: warning:` line, as its
errors do (no Python source location); anyone else's goes where Python sends it."""

from __future__ import annotations

import argparse
import warnings

import pytest

from gmlm.cli import evaluate
from gmlm.cli.main import PACKAGE, main


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
