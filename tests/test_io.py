"""Crash-safe writing helpers (gmlm.io)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from gmlm.errors import GmlmError
from gmlm.io import atomic_open, check_output_file, replace_dir, restore_replaced


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
