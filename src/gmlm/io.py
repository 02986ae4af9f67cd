"""Crash-safe file writing: write to a temporary file in the same folder, then rename."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from gmlm.errors import GmlmError


@contextmanager
def atomic_open(path: Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary sibling of `path`; on success it replaces `path`, on error it is removed.

    A crash mid-write therefore never leaves a half-written file under the final name. An
    existing `path` that is neither a regular file nor a folder (/dev/null, a named pipe) is
    written directly: there is no file to replace, and renaming over it would replace the
    device or pipe itself.
    """
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():
        with open(path, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
        return
    make_dirs(path.parent, f"cannot write {path}")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; give the usual permissions
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_output_file(path: Path, flag: str) -> None:
    """Fail now, before any long work, where `atomic_open(path)` would fail at the end: `path`
    is a folder, a folder on its way is a file, or the folder it goes in takes no new files
    (tried by creating and removing a file there). Missing folders are fine: `atomic_open`
    creates them. `flag` names the option in messages ("--output")."""
    path = Path(path)
    if path.is_dir():
        raise GmlmError(f"{flag} {path} is a folder; give a file path, e.g. {path / 'out.txt'}")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise GmlmError(f"{flag} {path}: {folder} is a file, not a folder; choose another path")
    if path.exists() and not path.is_file():
        return  # a device or pipe, written directly
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
    except OSError as err:
        raise GmlmError(
            f"{flag} {path}: cannot create files in {folder} ({err.strerror}); choose a "
            "writable location"
        ) from None
    os.close(fd)
    os.unlink(probe)


def make_dirs(path: Path, what: str) -> Path:
    """`mkdir -p path`; a failure (say a file in the way) is a GmlmError that starts with
    `what`, e.g. "--out runs/x", and names the obstacle."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            raise GmlmError(
                f"{what}: {existing} is a file, not a folder; choose another path"
            ) from None
        raise GmlmError(f"{what}: cannot create {path}: {err.strerror or err}") from None
    return path


def current_umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def replace_dir(tmp: Path, target: Path) -> None:
    """Put the finished folder `tmp` (a sibling of `target`) at `target`, replacing any old one.

    Each rename is atomic; an old folder is first moved aside into `.NAME.old-*` (removed
    afterwards, or by the next run's clean-up if a crash interrupts it), so `target` never holds
    a mix of old and new files.
    """
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, old / target.name)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)


def restore_replaced(target: Path) -> None:
    """Undo a `replace_dir` that a crash cut between its two renames.

    Then `target` is missing and the previous folder waits in `.NAME.old-*/NAME`: it is moved
    back (it is complete, a leftover temporary folder need not be), so that cleaning up the
    leftovers never deletes it. Call this before removing `.NAME.old-*` folders.
    """
    if target.exists() or target.is_symlink():
        return
    for old in sorted(target.parent.glob(f".{target.name}.old-*")):
        previous = old / target.name
        if previous.is_dir():
            os.replace(previous, target)
            return
