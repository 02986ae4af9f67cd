"""Text inputs read whole are bounded by the memory free (gmlm.data.textfiles.read_bounded):
a file too large is refused before it is read (its size, a gzip file's recorded size), a
stream as soon as what it sent outgrows the memory, and every command that reads a text file
says so in one line instead of meeting the kernel's out-of-memory killer. The memory free is
made small here (gmlm.memory.available_bytes), so the inputs stay a few hundred bytes."""

from __future__ import annotations

import gzip
import io
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gmlm import memory
from gmlm.cli.main import main
from gmlm.data import textfiles
from gmlm.data.textfiles import read_bounded, read_lines
from gmlm.memory import MemoryLimitError
from tests.helpers.text_commands import COMMANDS, text_commands

TEXT = "der Hund läuft.\n" * 40  # 680 bytes: twice that is over FREE, once is not
FREE = 1000
REFUSED = r"reading {path} \([0-9.]+ [kKMG]?i?B or more, held whole with its decoded text\) needs"


@pytest.fixture
def little_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "UNCHECKED_BYTES", 0)
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": FREE)


def test_within_memory_a_file_and_a_stream_read_whole(little_memory: None, tmp_path: Path) -> None:
    small = "ein Hund.\n" * 10
    (tmp_path / "s.de").write_text(small, encoding="utf-8")
    assert read_lines(tmp_path / "s.de") == ["ein Hund."] * 10
    assert read_bounded(io.BytesIO(small.encode()), Path("<stdin>")) == small.encode()


def test_a_file_too_large_is_refused_before_it_is_read(
    little_memory: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.de"
    path.write_text(TEXT, encoding="utf-8")
    opened: list[object] = []
    real_open = Path.open

    def watched(self: Path, *args: object, **kwargs: object) -> object:
        opened.append(self)
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", watched)
    with pytest.raises(MemoryLimitError, match=REFUSED.format(path=path)):
        read_lines(path)
    assert opened == []  # refused from its size alone


def test_a_gzip_file_is_refused_by_the_size_its_trailer_records(
    little_memory: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.de.gz"
    path.write_bytes(gzip.compress(TEXT.encode()))
    assert path.stat().st_size < FREE // 2  # compressed, it would pass

    def decompress(*args: object, **kwargs: object) -> None:
        raise AssertionError("decompressed before its recorded size was checked")

    monkeypatch.setattr(textfiles.gzip, "open", decompress)
    with pytest.raises(MemoryLimitError, match=REFUSED.format(path=path)):
        read_lines(path)


def test_a_stream_is_refused_once_what_it_sent_outgrows_the_memory(
    little_memory: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(textfiles, "READ_BLOCK", 100)
    stream = io.BytesIO(TEXT.encode() * 1000)
    with pytest.raises(MemoryLimitError, match=REFUSED.format(path="<stdin>")):
        read_bounded(stream, Path("<stdin>"))
    assert stream.tell() <= FREE // 2 + 100  # stopped after the block that crossed the line


def test_a_pipe_is_read_as_a_stream(little_memory: None, tmp_path: Path) -> None:
    """A named pipe (bash's <(zcat ...)) has no size: it is bounded as it is read."""
    fifo = tmp_path / "pipe.de"
    os.mkfifo(fifo)
    writer = os.fork()
    if writer == 0:  # pragma: no cover - the child only writes
        try:
            with open(fifo, "wb") as handle:
                handle.write(TEXT.encode())
        finally:
            os._exit(0)
    try:
        with pytest.raises(MemoryLimitError, match=REFUSED.format(path=fifo)):
            read_lines(fifo)
    finally:
        os.waitpid(writer, 0)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_reading_a_text_file_refuses_one_too_large_in_one_line(
    command: str, little_memory: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big, small = tmp_path / "big.de", tmp_path / "small.en"
    big.write_text(TEXT, encoding="utf-8")
    small.write_text("a dog.\n" * 40, encoding="utf-8")
    assert main(text_commands(tmp_path, big, small)[command]) == 2
    err = capsys.readouterr().err.splitlines()  # progress lines (data prepare's) may come first
    assert [line for line in err if line.startswith("gmlm: error:")] == err[-1:], err
    assert err[-1].startswith(f"gmlm: error: reading {big} (") and "split it into" in err[-1]


def test_translate_refuses_standard_input_too_large_in_one_line(
    little_memory: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(TEXT.encode())))
    assert main(["translate", "--checkpoint", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gmlm: error: reading <stdin> ("), err
