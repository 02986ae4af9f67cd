"""Every command that reads a text file named on its command line: one table, for the tests
of what each does with a bad file (too large for the memory, not UTF-8 text)."""

from __future__ import annotations

from pathlib import Path


def text_commands(tmp: Path, bad: Path, good: Path) -> dict[str, list[str]]:
    """Every command that reads a text file named on its command line, reading `bad` (and
    `good` where it needs another file; `tmp`: a folder for what it would write)."""
    return {
        "translate --input": ["translate", "--checkpoint", str(tmp / "ckpt"), "--input", str(bad)],
        "evaluate --hyp": ["evaluate", "--hyp", str(bad), "--ref", str(good)],
        "evaluate --ref": ["evaluate", "--hyp", str(good), "--ref", str(bad)],
        "evaluate --src": ["evaluate", "--hyp", str(good), "--ref", str(good), "--src", str(bad)],
        "loadtest --input": ["loadtest", "--url", "http://127.0.0.1:9", "--input", str(bad)],
        "data prepare files:": [
            "data",
            "prepare",
            "--corpus",
            f"files:{bad},{good}",
            "--out",
            str(tmp / "data"),
        ],
    }


COMMANDS = list(text_commands(Path(), Path(), Path()))
