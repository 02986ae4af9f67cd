"""Every command that reads a text file refuses one that is not UTF-8 text in lines ended by
line feeds, in one line that names the file and the fix, before any work: Latin-1, UTF-16 of
ASCII letters alone (valid UTF-8, but a NUL after every letter), a stray NUL byte, a
byte-order mark inside the text, CR line ends; and `gmlm translate` the same on its standard
input."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gmlm.cli.main import main
from tests.helpers.text_commands import COMMANDS, text_commands

TEXT = "Ein Hund rennt durch den Schnee.\nZwei Kinder spielen am Strand.\n"
# Each kind of bad file: its bytes, what the one-line error says after the file's name, and
# the fix it gives.
BAD = {
    "Latin-1": (
        "Ein Hund läuft über die Wiese.\n".encode("latin-1"),
        ":1: invalid UTF-8",
        "`iconv -f latin1 -t utf-8 IN > OUT`",
    ),
    "UTF-16 of ASCII, no byte-order mark": (
        TEXT.encode("utf-16-le"),
        ": UTF-16LE text",
        "`iconv -f utf-16le -t utf-8 IN > OUT`",
    ),
    "a NUL byte": (
        TEXT.replace("Hund", "Hu\x00nd").encode(),
        ":1: a NUL byte at column 7",
        "`tr -d '\\000' < IN > OUT`",
    ),
    "a byte-order mark inside (two files joined)": (
        ("\ufeff" + TEXT).encode() * 2,
        ":3: a byte-order mark (U+FEFF) at column 1",
        "`sed -i 's/\\xEF\\xBB\\xBF//g' FILE`",
    ),
    "CR line ends (an old Mac file)": (
        TEXT.replace("\n", "\r").encode(),
        ": ends its lines with carriage returns",
        "`tr '\\r' '\\n' < IN > OUT`",
    ),
}


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_reading_a_text_file_refuses_text_not_in_utf8(
    command: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, says, fix = BAD[kind]
    bad, good = tmp_path / "bad.de", tmp_path / "good.en"
    bad.write_bytes(data)
    good.write_text("a dog.\n", encoding="utf-8")
    assert main(text_commands(tmp_path, bad, good)[command]) == 2
    err = capsys.readouterr().err.splitlines()  # progress lines (data prepare's) may come first
    assert [line for line in err if line.startswith("gmlm: error:")] == err[-1:], err
    assert err[-1].startswith(f"gmlm: error: {bad}{says}") and err[-1].endswith(fix), err[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.de", "good.en"]  # nothing written


@pytest.mark.parametrize("kind", BAD)
def test_translate_refuses_standard_input_not_in_utf8(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data, says, fix = BAD[kind]
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(data)))
    assert main(["translate", "--checkpoint", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gmlm: error: <stdin>{says}"), err
    assert err.rstrip().endswith(fix), err
