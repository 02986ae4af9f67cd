"""One writer per output folder (gmlm.locking): a second writer, another process, fails at once
naming the folder and the holder; the lock goes with its holder, also after kill -9; one
process may nest locks; and every command that writes a folder over time takes it first."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gmlm.cli.main import main
from gmlm.errors import GmlmError
from gmlm.locking import LOCK_FILE, folder_lock
from tests.helpers.corpora import make_pairs, write_corpus
from tests.helpers.outputs import COMMANDS as OUTPUT_COMMANDS
from tests.helpers.outputs import output_layout

HOLD = """\
import sys, time
from pathlib import Path
from gmlm.locking import folder_lock
with folder_lock(Path(sys.argv[1]), "held"):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin
"""


@contextmanager
def held_by_another_process(folder: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding `folder`'s lock until the block ends (closing its stdin ends it)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    try:
        yield proc
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
        proc.wait()


def test_a_second_writer_fails_at_once_and_the_lock_goes_with_its_holder(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    with held_by_another_process(folder) as holder:
        with pytest.raises(GmlmError) as caught, folder_lock(folder, f"--out {folder}"):
            pytest.fail("the lock was taken twice")
        assert str(caught.value) == (
            f"--out {folder} is in use by another gmlm process (PID {holder.pid}), which "
            "writes there: wait until it ends (or stop it), or choose another path"
        )
        assert [p.name for p in folder.iterdir()] == [LOCK_FILE]
    # The holder ended normally: its lock file is gone, and the folder it made for it.
    assert not folder.exists()
    with folder_lock(folder, "x"):
        (folder / "mine.txt").write_text("x")
    assert [p.name for p in folder.iterdir()] == ["mine.txt"]


def test_a_lock_whose_holder_was_killed_is_free(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    with held_by_another_process(folder) as holder:
        holder.send_signal(signal.SIGKILL)
        assert holder.wait() == -signal.SIGKILL
        assert (folder / LOCK_FILE).is_file()  # left behind, but no longer locked
        with folder_lock(folder, "x"):
            assert (folder / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert list(folder.iterdir()) == []


def test_one_process_nests_locks_and_a_folder_made_for_nothing_goes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with folder_lock(run, "x"), folder_lock(run, "x"), folder_lock(run / "stage", "y"):
        (run / "stage" / "out.txt").write_text("x")
        assert (run / LOCK_FILE).is_file() and (run / "stage" / LOCK_FILE).is_file()
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == [
        "stage",
        "stage/out.txt",
    ]
    with pytest.raises(RuntimeError), folder_lock(tmp_path / "new", "x"):
        raise RuntimeError  # a command failing before it writes
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("x")
    taken = folder_lock(tmp_path / "file", f"--out {tmp_path / 'file'}")
    with pytest.raises(GmlmError, match=r"--out .*file: .*file is a file, not a folder"), taken:
        pass


@pytest.mark.parametrize(
    "command", ["train", "data prepare", "distill", "reproduce", "export", "average"]
)
def test_every_command_writing_a_folder_refuses_one_in_use(
    command: str, word_task_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    flag = {"train": f"out={out}"}.get(command, f"--out {out}")
    corpus = write_corpus(tmp_path, *make_pairs(50))
    args = {
        "train": ["train", "--config", "tiny-ar", f"data={word_task_data}", f"out={out}"],
        "data prepare": ["data", "prepare", "--corpus", corpus],
        "distill": ["distill", "--teacher", str(tmp_path / "t"), "--data", str(word_task_data)],
        "reproduce": ["reproduce", "--preset", "smoke"],
        "export": ["export", "--checkpoint", str(tmp_path / "t")],  # written whole, held too
        "average": ["average", "--run", str(tmp_path / "trun")],
    }[command]
    if command != "train":
        args += ["--out", str(out)]
    if command not in ("export", "average"):
        args.append("--no-progress")
    if command == "average":  # a run as average_run checks one before writing
        output_layout(tmp_path)
    with held_by_another_process(out) as holder:
        assert main(args) == 2
        assert f"gmlm: error: {flag} is in use by another gmlm process (PID {holder.pid})" in (
            capsys.readouterr().err
        )
        assert [p.name for p in out.iterdir()] == [LOCK_FILE]  # nothing written


HOLD_FILE = """\
import sys
from pathlib import Path
from gmlm.io import check_output_file
from gmlm.locking import outputs_held
with outputs_held():
    check_output_file(Path(sys.argv[1]), "--output")
    print("held", flush=True)
    sys.stdin.read()  # until the test closes stdin
"""


@pytest.mark.parametrize(
    "command", [c for c in OUTPUT_COMMANDS if not c.startswith(("export", "reproduce", "average"))]
)
def test_every_command_writing_a_file_refuses_one_another_process_writes(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same table as the outputs-never-inputs rule: each command's output file, held by
    another process (a gmlm command writing it), is refused before any work; released, it
    is free again and no lock file stays beside it."""
    argv, _target, _stdin = OUTPUT_COMMANDS[command]
    output_layout(tmp_path)
    out = tmp_path / "results" / "out.md"
    out.parent.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_FILE, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))
        assert main([arg.format(tmp=tmp_path, out=out) for arg in argv.split()]) == 2
        err = capsys.readouterr().err
        flag = argv.split("{out}")[0].split()[-1]
        assert (
            f"gmlm: error: {flag} {out} is in use by another gmlm process (PID {holder.pid})"
            in (err)
        ), err
        assert not out.exists()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    assert list(out.parent.iterdir()) == []  # the holder's lock went with it
