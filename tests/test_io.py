"""Crash-safe writing helpers (gmlm.io)."""

from __future__ import annotations

import errno
import gzip
import os
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gmlm.errors import GmlmError
from gmlm.io import (
    MODEL_FILE,
    WriteError,
    atomic_open,
    atomic_write_text,
    check_output_file,
    check_output_folder,
    replace_dir,
    restore_replaced,
    writing,
)


def test_atomic_open_writes_into_a_pipe_instead_of_replacing_it(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()), daemon=True)
    reader.start()
    with atomic_open(pipe) as handle:
        handle.write("through the pipe\n")
    reader.join(timeout=10)
    assert received == [b"through the pipe\n"]
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_check_output_file(tmp_path: Path) -> None:
    check_output_file(tmp_path / "new" / "deeper" / "out.txt", "--out")  # atomic_open makes them
    (tmp_path / "out.txt").write_text("old")
    check_output_file(tmp_path / "out.txt", "--out")
    with pytest.raises(GmlmError, match=r"--out .* is a folder"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(GmlmError, match=r"out\.txt is a file, not a folder"):
        check_output_file(tmp_path / "out.txt" / "x" / "y.txt", "--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no probe file left


@pytest.mark.skipif(os.geteuid() == 0, reason="root creates files in read-only folders")
def test_check_output_file_in_a_read_only_folder(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        with pytest.raises(GmlmError, match=r"cannot create files in .*locked \(Permission"):
            check_output_file(locked / "out.txt", "--out")
    finally:
        locked.chmod(0o755)


def test_restore_replaced_undoes_a_half_done_replace(tmp_path: Path) -> None:
    target = tmp_path / "data"
    target.mkdir()
    (target / "a.txt").write_text("old")
    new = tmp_path / ".data.tmp-1"
    new.mkdir()
    (new / "a.txt").write_text("new")
    restore_replaced(target)  # nothing to undo
    assert (target / "a.txt").read_text() == "old"
    # The first of replace_dir's renames done, the second not (a kill in between):
    old = tmp_path / ".data.old-1"
    old.mkdir()
    target.rename(old / "data")
    restore_replaced(target)
    assert (target / "a.txt").read_text() == "old" and not (old / "data").exists()
    replace_dir(new, target)
    assert (target / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".data.old-1", "data"]


def fail_with(code: int) -> Callable[..., None]:
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    return fail


@pytest.mark.parametrize(
    ("step", "code", "cause"),
    [
        ("fsync", errno.ENOSPC, "No space left on device; free some space"),
        ("replace", errno.EROFS, "Read-only file system; choose a writable location"),
        ("replace", errno.EDQUOT, "quota exceeded; free some space"),
    ],
)
def test_a_failed_write_is_one_error_and_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str, code: int, cause: str
) -> None:
    target = tmp_path / "out.txt"
    target.write_text("previous\n")
    monkeypatch.setattr(os, step, fail_with(code))
    with pytest.raises(WriteError, match=re.escape(f"cannot write {target}: ")) as caught:
        atomic_write_text(target, "new\n")
    assert cause.lower() in str(caught.value).lower()
    monkeypatch.undo()
    assert target.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary file left


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_full_device_is_one_error() -> None:
    with pytest.raises(WriteError, match=r"^cannot write /dev/full: No space left on device"):
        atomic_write_text(Path("/dev/full"), "x" * 100)


def test_a_folder_written_whole_names_itself_not_its_temporary_file(tmp_path: Path) -> None:
    folder, inner = tmp_path / "dataset", tmp_path / ".dataset.tmp-1" / "x.bin"
    with pytest.raises(WriteError) as caught, writing(folder), atomic_open(inner, "wb") as out:
        out.write(b"x")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a full disk would
    assert str(caught.value).startswith(f"cannot write {folder}: No space left on device")
    assert list(inner.parent.iterdir()) == []


def test_text_named_gz_is_written_gzip_compressed(tmp_path: Path) -> None:
    target = tmp_path / "hyp.en.gz"
    atomic_write_text(target, "the dog runs.\n\nä\n")
    with gzip.open(target, "rt", encoding="utf-8") as handle:
        assert handle.read() == "the dog runs.\n\nä\n"
    first = target.read_bytes()
    atomic_write_text(target, "the dog runs.\n\nä\n")
    assert target.read_bytes() == first  # no time stamp or temporary name in the header
    with atomic_open(tmp_path / "raw.gz", "wb") as handle:  # bytes are written as given
        handle.write(first)
    assert (tmp_path / "raw.gz").read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyp.en.gz", "raw.gz"]


def test_replace_dir_puts_the_old_folder_back_if_the_new_one_cannot_take_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, new = tmp_path / "last", tmp_path / ".last.tmp-1"
    for folder, text in ((target, "old"), (new, "new")):
        folder.mkdir()
        (folder / "a.txt").write_text(text)
    real_replace = os.replace

    def second_fails(src: Path, dst: Path) -> None:
        if Path(src) == new:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    with pytest.raises(OSError):
        replace_dir(new, target)
    assert (target / "a.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".last.tmp-1", "last"]


def make_run(folder: Path) -> Path:
    """A training run folder as `gmlm train` leaves it: config, metrics, a checkpoint."""
    (folder / "last").mkdir(parents=True)
    (folder / "last" / MODEL_FILE).write_bytes(b"weights")
    (folder / "config.yaml").write_text("kind: ar\n")
    (folder / "metrics.jsonl").write_text("")
    return folder


def test_an_output_file_is_never_an_input_nor_inside_a_checkpoint_or_run(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    text = tmp_path / "in.de"
    text.write_text("der Hund.\n")
    inputs = {"--input": text, "--checkpoint": run, "--teacher": None}
    refused = {
        text: "--output .*in.de is the --input file this command reads",
        run / "notes.txt": r"lies inside --checkpoint .*run, which this command reads",
        run / "last" / "hyp.en": "lies inside --checkpoint",
    }
    for path, message in refused.items():
        with pytest.raises(GmlmError, match=message):
            check_output_file(path, "--output", inputs=inputs)
    for path, kind in ((run / "hyp.en", "a training run"), (run / "last" / "x", "a checkpoint")):
        with pytest.raises(GmlmError, match=f"lies inside .*, {kind} folder, where only its"):
            check_output_file(path, "--output")  # not an input: inside a gmlm folder anyway
    (tmp_path / "hyp.en").write_text("an earlier translation\n")
    check_output_file(tmp_path / "hyp.en", "--output", inputs=inputs)  # replaced, like `>`
    with pytest.raises(GmlmError, match=r"exists and is not a report; refusing to overwrite"):
        check_output_file(tmp_path / "hyp.en", "--publish", own=lambda _: False, what="a report")
    assert (tmp_path / "hyp.en").read_text() == "an earlier translation\n"


def test_an_output_folder_is_new_empty_or_its_own_kind(tmp_path: Path) -> None:
    def own(folder: Path) -> bool:
        return (folder / "export.json").is_file()

    def check(path: Path, **kwargs: Any) -> bool:
        return check_output_folder(path, "--out", "an export", own, **kwargs)

    assert check(tmp_path / "new") is False
    (tmp_path / "empty").mkdir()
    assert check(tmp_path / "empty") is False
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "export.json").write_text("{}")
    assert check(earlier) is True
    with pytest.raises(GmlmError, match=r"holds an export written earlier; pass --force to"):
        check(earlier, replace=False)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    run = make_run(tmp_path / "run")
    refused = {
        mine: r"is not empty and is not an export; refusing to overwrite it \(it holds notes",
        tmp_path / "file": "exists and is not an export: .*file is a file, not a folder",
        run / "export": "lies inside .*run, a training run folder",
        run / "last": "lies inside .*run, a training run folder",
        tmp_path: r"holds --checkpoint .*earlier, which this command reads",
        earlier: "is the --checkpoint folder this command reads",
    }
    for path, message in refused.items():
        with pytest.raises(GmlmError, match=message):
            check(path, inputs={"--checkpoint": earlier})
    assert (mine / "notes.txt").read_text() == "mine"
