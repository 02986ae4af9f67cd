"""One writer per output folder: an exclusive lock held while a command writes into its folder.

`gmlm train`, `gmlm distill`, `gmlm data prepare` and `gmlm reproduce` write into a folder of
their own over minutes or hours, and a rerun resumes what it finds there; two of them on one
folder would each take the other's half-done work for its own (a training resuming from a
checkpoint another is still writing, one run's `last/` beside the other's metrics). So each
holds ``FOLDER/.gmlm.lock`` locked (``fcntl.flock``, exclusive) from before its first write
until it ends, and a second writer fails at once with an error that names the folder and the
holder's PID. The system drops the lock when the process ends, however it ends (``kill -9``
too), so no lock is ever stale: the file, removed on a normal release (with the folder, if
the lock created it and nothing was written), may stay after a kill and is then simply
locked again. A process may take a lock it holds again (nested calls on one folder); folders
inside a locked one have locks of their own (reproduce's stages).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from gmlm.errors import GmlmError
from gmlm.io import (
    HELD_FOLDERS,
    LOCK_FILE,
    OUTPUT_CHECKED,
    Inputs,
    check_output_folder,
    failure_cause,
    make_dirs,
)

__all__ = ["LOCK_FILE", "folder_lock"]

# The folders this process holds (resolved path -> [descriptor of the lock file, depth]),
# kept in gmlm.io, whose output checks let their holder write inside them.
_held = HELD_FOLDERS


@contextlib.contextmanager
def folder_lock(folder: Path, what: str) -> Iterator[Path]:
    """Create `folder` if needed and hold its lock for the duration; yields `folder`.

    `what` names the folder as the user gave it, for messages ("out=runs/padir", "--out
    runs/demo"). Another process holding the lock is a GmlmError, raised before anything is
    written.
    """
    folder = Path(folder)
    key = folder.resolve()
    if key in _held:
        _held[key][1] += 1
        try:
            yield folder
        finally:
            _held[key][1] -= 1
        return
    # The folders this lock creates, innermost first: removed again if nothing was written.
    created = [f for f in (folder, *folder.parents) if not f.exists()]
    make_dirs(folder, what)
    try:
        fd = _acquire(folder / LOCK_FILE, what)
    except GmlmError:
        _remove_empty(created)
        raise
    _held[key] = [fd, 1]
    try:
        yield folder
    finally:
        del _held[key]
        _release(folder / LOCK_FILE, fd)
        _remove_empty(created)  # a command that failed before writing leaves no empty folder


def _remove_empty(folders: list[Path]) -> None:
    """Remove `folders` (innermost first) while they are empty."""
    for made in folders:
        try:
            made.rmdir()
        except OSError:
            return


def _acquire(path: Path, what: str) -> int:
    """The descriptor of lock file `path`, locked, with this process's PID written in it."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:  # a holder that created the folder removed it on release
            make_dirs(path.parent, what)
            continue
        except OSError as err:
            raise GmlmError(
                f"{what}: cannot create the lock file {path} ({err.strerror}); choose a "
                "writable folder"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise GmlmError(
                f"{what} is in use by another gmlm process{holder}, which writes there: wait "
                "until it ends (or stop it), or choose another path"
            ) from None
        except OSError as err:
            os.close(fd)
            raise GmlmError(
                f"{what}: cannot lock {path} ({err.strerror}); this file system may not "
                "support locks: choose a folder on a local disk"
            ) from None
        # A holder that released between our open and our lock removed the file we opened:
        # then the lock is on a file nobody else will open; take the one at `path` instead.
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as err:  # a full disk: no lock file is left behind, empty or half-written
        _release(path, fd)
        cause = failure_cause(err)
        raise GmlmError(f"{what}: cannot write the lock file {path}: {cause}") from None
    return fd


def _holder(fd: int) -> str:
    """ " (PID n)" as the holder wrote it in the lock file, or "" before it has."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, 32, 0).decode().strip())
        return f" (PID {pid})"
    return ""


def _release(path: Path, fd: int) -> None:
    """Remove the lock file (if it is still ours: a folder replaced whole took it away) while
    holding it, then unlock: one that opens it meanwhile finds it gone and starts again."""
    with contextlib.suppress(OSError):
        if os.path.samestat(os.fstat(fd), os.stat(path)):
            os.unlink(path)
    os.close(fd)


@contextlib.contextmanager
def output_folder(
    path: Path,
    flag: str,
    what: str,
    own: Callable[[Path], bool],
    *,
    inputs: Inputs | None = None,
    replace: bool = True,
) -> Iterator[bool]:
    """For a command that writes the folder `path` whole: :func:`gmlm.io.check_output_folder`
    before anything is created, then the folder's lock held while the caller writes (a second
    writer is refused, not raced), checked again under it. Yields whether `path` holds an
    earlier `what`."""
    check_output_folder(path, flag, what, own, inputs=inputs, replace=replace)
    with folder_lock(path, f"{flag} {path}"):
        yield check_output_folder(path, flag, what, own, inputs=inputs, replace=replace)


# The output files this process holds (resolved path -> its lock file and descriptor).
_outputs: dict[Path, tuple[Path, int]] = {}


def hold_output(path: Path, flag: str, folder: Path) -> None:
    """Hold the writer lock of the output file `path` until the command ends
    (:func:`outputs_held`): a lock file in `folder`, the nearest existing
    folder on its way (beside the file where its folder exists), named after the file. Held
    by another process: a GmlmError naming it. Held already by this one, or this is not
    torchrun's rank 0 (which alone writes a job's outputs): nothing to do."""
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun only rank 0 writes outputs
        return
    target = Path(path).resolve()
    if target in _outputs:
        return
    if target.parent.is_dir():
        lock = target.parent / f".{target.name}{LOCK_FILE}"
    else:  # folders still to make: the lock waits in the nearest one there is
        rest = Path(path).absolute().relative_to(Path(folder).absolute())
        lock = Path(folder) / f".{str(rest).replace('/', '%')}{LOCK_FILE}"
    _outputs[target] = (lock, _acquire(lock, f"{flag} {path}"))


@contextlib.contextmanager
def outputs_held() -> Iterator[None]:
    """While a command runs (the command line wraps each in this): every output file it
    checks (:func:`gmlm.io.check_output_file`) is held (:func:`hold_output`) until it ends,
    so a second gmlm process writing the same file is refused before its work."""
    OUTPUT_CHECKED.append(hold_output)
    try:
        yield
    finally:
        OUTPUT_CHECKED.remove(hold_output)
        for lock, fd in _outputs.values():
            _release(lock, fd)
        _outputs.clear()
