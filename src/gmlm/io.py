"""Writing outputs: crash-safe, with one-line errors, and never over what gmlm did not write.

Every file goes through :func:`atomic_open`: it is written under a temporary name in its
folder and renamed into place once complete, so a crash or a full disk leaves the previous
file (or none), never half a file. A failure to write (a full disk, a read-only folder, a
quota) is a :class:`WriteError`, one line naming the output and the cause, instead of a
traceback; a folder written whole (a checkpoint, a dataset) reports its own name, not that
of the temporary file that failed (:func:`writing`). A text file whose name ends in ``.gz``
is written gzip-compressed, as the readers read it.

What an output may replace (docs/DESIGN.md section 6): :func:`check_output_file` and
:func:`check_output_folder`, called by each command before its work.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from gmlm.errors import GmlmError

# The files that mark the folders gmlm writes whole and reads back (declared here, torch-free,
# so that the command line checks paths before loading anything; gmlm.checkpoint uses
# them).
# The lock file of a folder a writer holds (gmlm.locking); never counts as content.
LOCK_FILE = ".gmlm.lock"
MODEL_FILE = "model.safetensors"  # every checkpoint folder holds its weights here
MANIFEST = "manifest.json"  # every prepared dataset folder's record (gmlm.data.binarized)
REPRODUCE_FILE = "reproduce.yaml"  # every `gmlm reproduce` run folder's settings
# Called as hook(path, flag, folder) for every output file check_output_file accepts (`folder`:
# the nearest existing folder on its way): while a command of the command line runs,
# gmlm.locking.outputs_held puts here the hook that holds the file's writer lock until the
# command ends, so that two processes never write one output (io cannot import locking,
# which builds on it).
OUTPUT_CHECKED: list[Callable[[Path, str, Path], None]] = []
# The folders this process holds the lock of, resolved -> [lock file descriptor, nesting
# depth] (gmlm.locking.folder_lock keeps it): their writer may put files in them, which the
# rule of check_not_protected keeps others from.
HELD_FOLDERS: dict[Path, list[int]] = {}
RUN_CHECKPOINTS = ("last", "best", "averaged")  # the checkpoint folders a run folder can hold

# What to do about a failed write, by its cause.
_FIXES = {
    errno.ENOSPC: "free some space or choose another path",
    errno.EDQUOT: "free some space or choose another path",
    errno.EFBIG: "choose another path",
    errno.EROFS: "choose a writable location",
    errno.EACCES: "choose a writable location",
    errno.EPERM: "choose a writable location",
}


class WriteError(GmlmError):
    """`path` could not be written; `cause` says why ("No space left on device; free ...")."""

    def __init__(self, path: Path, cause: str) -> None:
        super().__init__(f"cannot write {path}: {cause}")
        self.path = path
        self.cause = cause


def failure_cause(err: OSError) -> str:
    """What failed in a write and what to do: "No space left on device; free some space or
    choose another path"."""
    fix = _FIXES.get(err.errno or 0, "choose another path")
    return f"{err.strerror or err}; {fix}"


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Report a failure to write the output `path` (a file, or a folder and everything
    written into it) as a WriteError naming `path`: an OSError, or the WriteError of a file
    inside it (a folder written under a temporary name reports the name asked for)."""
    try:
        yield
    except WriteError as err:
        if err.path == path:
            raise
        raise WriteError(path, err.cause) from err
    except OSError as err:
        raise WriteError(path, failure_cause(err)) from err


@contextmanager
def atomic_open(path: Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary sibling of `path`; on success it replaces `path`, on error it is removed.

    A crash mid-write therefore never leaves a half-written file under the final name, and a
    failed write (an OSError: a full disk...) is a WriteError that leaves `path` as it was.
    In text mode, a name ending in .gz is written gzip-compressed. An existing `path` that is
    neither a regular file nor a folder (/dev/null, a named pipe) is written directly: there
    is no file to replace, and renaming over it would replace the device or pipe itself.
    """
    path = Path(path)
    with writing(path):
        if path.exists() and not path.is_file() and not path.is_dir():
            with open(path, "wb") as raw, _encoded(raw, path, mode, encoding) as handle:
                yield handle
            return
        make_dirs(path.parent, f"cannot write {path}")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600; the usual permissions
            with os.fdopen(fd, "wb") as raw:
                with _encoded(raw, path, mode, encoding) as handle:
                    yield handle
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


@contextmanager
def _encoded(raw: IO[bytes], path: Path, mode: str, encoding: str | None) -> Iterator[IO[Any]]:
    """`raw` as the handle `mode` asks for: itself in binary mode, else a text layer, over a
    gzip layer when `path` ends in .gz. The layers are finished on exit; `raw` stays open."""
    if "b" in mode:
        yield raw
        return
    if path.name.endswith(".gz"):
        # No name or time in the header: the same text gives the same bytes.
        compressed = gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=raw, mtime=0)
        with io.TextIOWrapper(compressed, encoding=encoding) as zipped:  # closes the gzip layer
            yield zipped
        return
    text = io.TextIOWrapper(raw, encoding=encoding)
    try:
        yield text
    finally:
        text.detach()  # flushes, and leaves `raw` open


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file `path`, in hex."""
    with Path(path).open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


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


def share_permissions(path: Path) -> None:
    """Give `path` (a file, or a folder and everything in it) the permissions ordinary files
    and folders get under the current umask: temporary files and folders are private
    (0600/0700), and so is every file safetensors writes."""
    umask = current_umask()
    for item in [path, *(path.rglob("*") if path.is_dir() else [])]:
        item.chmod((0o777 if item.is_dir() else 0o666) & ~umask)


def replace_dir(tmp: Path, target: Path) -> None:
    """Put the finished folder `tmp` (a sibling of `target`) at `target`, replacing any old one.

    Each rename is atomic; an old folder is first moved aside into `.NAME.old-*` (removed
    afterwards, or by the next run's clean-up if a crash interrupts it), so `target` never holds
    a mix of old and new files. Should the second rename fail, the old folder is put back.
    """
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, old / target.name)
        try:
            os.replace(tmp, target)
        except BaseException:
            os.replace(old / target.name, target)
            old.rmdir()
            raise
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


# --- what an output may replace ------------------------------------------------------------


class StandardInput:
    """Standard input among a command's inputs (:data:`STDIN`): an output may not be the file
    that the shell redirected into it (``gmlm translate --output x.txt < x.txt``)."""

    def __repr__(self) -> str:
        return "STDIN"


STDIN = StandardInput()

# A command's inputs, by flag: {"--checkpoint": path, "standard input": STDIN}; None for one
# not given.
Inputs = Mapping[str, "Path | str | StandardInput | None"]


def is_run_folder(folder: Path) -> bool:
    """Whether `folder` is a training run: the config.yaml that `gmlm train` writes beside
    its metrics.jsonl (written from the first step) or its `last/` checkpoint."""
    return (folder / "config.yaml").is_file() and (
        (folder / "metrics.jsonl").is_file() or (folder / "last").is_dir()
    )


def gmlm_folder(folder: Path) -> str | None:
    """What `folder` is if gmlm wrote it as a whole to read it back ("a checkpoint folder",
    "a training run folder", "a prepared dataset folder", "a reproduce run folder"), or if a
    gmlm command is writing it (its lock file is there), else None."""
    if (folder / MODEL_FILE).is_file():
        return "a checkpoint folder"
    if is_run_folder(folder):
        return "a training run folder"
    if _gmlm_manifest(folder / MANIFEST):
        return "a prepared dataset folder"
    if (folder / REPRODUCE_FILE).is_file():
        return "a reproduce run folder"
    if _lock_held(folder / LOCK_FILE):
        return "a folder a gmlm command is writing"
    return None


def _lock_held(path: Path) -> bool:
    """Whether a process holds the lock file `path` (gmlm.locking); one left by a killed
    holder is not held."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: held; another error: say held, the safe side
        return True
    finally:
        os.close(fd)  # also releases the shared lock taken just now
    return False


def _gmlm_manifest(path: Path) -> bool:
    """Whether `path` is a manifest gmlm wrote (its "format" names a gmlm format), not another
    tool's file of that common name."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and str(record.get("format", "")).startswith("gmlm-")


def _named(flag: str, path: Path) -> str:
    """How messages show an option's value: "--out runs/x", "out=runs/x"."""
    return f"{flag}{path}" if flag.endswith("=") else f"{flag} {path}"


def _file_stat(path: Path) -> os.stat_result | None:
    """`path`'s status where it is an existing regular file (a link followed), else None."""
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        return None
    return found if stat.S_ISREG(found.st_mode) else None


def _stdin_stat() -> os.stat_result | None:
    """The status of the regular file standard input reads (a shell's `< FILE`), else None
    (a terminal, a pipe, or a stream without a descriptor)."""
    try:
        found = os.fstat(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    return found if stat.S_ISREG(found.st_mode) else None


def _linked_inside(folder: Path, target: os.stat_result) -> Path | None:
    """A file inside `folder` that is the file `target` under another name (a hard link)."""
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            try:
                if os.path.samestat(os.lstat(path), target):
                    return path
            except OSError:
                continue
    return None


def _same_file(a: Path, b: Path) -> bool:
    """Whether the paths `a` and `b` name one file: the same path once links are resolved, or
    the same existing file under two names (a hard link)."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    found_a, found_b = _file_stat(a), _file_stat(b)
    return found_a is not None and found_b is not None and os.path.samestat(found_a, found_b)


def check_not_protected(path: Path, flag: str, inputs: Inputs | None = None) -> None:
    """The rule every output obeys: it is none of the command's `inputs` however it is named
    (the same path, a symbolic or hard link to it, or the file standard input reads when
    `inputs` holds :data:`STDIN`), neither inside one nor holding one, and not inside a folder
    gmlm wrote whole or is writing (:func:`gmlm_folder`: their writers own every file in them),
    nor a lock file."""
    shown = _named(flag, path)
    target = Path(path).resolve()
    existing = _file_stat(target)
    for name, given in (inputs or {}).items():
        if given is None:
            continue
        if isinstance(given, StandardInput):
            redirected = _stdin_stat()
            if existing and redirected and os.path.samestat(existing, redirected):
                raise GmlmError(
                    f"{shown} is the file this command reads from {name}: the output would "
                    "replace its input; choose another path"
                )
            continue
        source = Path(given).resolve()
        if _same_file(target, source):
            what = "folder" if source.is_dir() else "file"
            raise GmlmError(f"{shown} is the {name} {what} this command reads; choose another path")
        if existing is not None and existing.st_nlink > 1 and source.is_dir():
            linked = _linked_inside(source, existing)
            if linked is not None:
                raise GmlmError(
                    f"{shown} is {linked} under another name (a hard link), which {name} "
                    f"{given} holds and this command reads; choose another path"
                )
        if source in target.parents or target in source.parents:
            where = "lies inside" if source in target.parents else "holds"
            raise GmlmError(
                f"{shown} {where} {name} {given}, which this command reads; choose another path"
            )
    if target.name == LOCK_FILE:
        raise GmlmError(f"{shown} is the name of gmlm's lock files; choose another name")
    for folder in target.parents:
        if folder in HELD_FOLDERS:  # this process writes this folder: it may write inside
            break
        kind = gmlm_folder(folder)
        if kind is not None:
            raise GmlmError(
                f"{shown} lies inside {folder}, {kind}, where only its writer puts files; "
                "choose a path outside it"
            )


def check_output_file(
    path: Path,
    flag: str,
    *,
    inputs: Inputs | None = None,
    own: Callable[[Path], bool] | None = None,
    what: str = "",
) -> None:
    """Fail now, before any long work, where writing the file `path` would fail or would
    replace what it must not: `path` is a folder, a folder on its way is a file, the folder
    it goes in takes no new files (tried by creating and removing a file there), or
    :func:`check_not_protected` refuses it. An existing file is the command's own kind and
    is replaced, as a shell redirect would, unless `own` says it is not `what` (a report
    gmlm published): then it is refused. Missing folders are fine: `atomic_open` creates
    them. `flag` names the option in messages ("--output"). Accepted by a command of the
    command line, the file is held until the command ends (:data:`OUTPUT_CHECKED`): a
    second gmlm process writing it is refused."""
    path = Path(path)
    if path.is_dir():
        raise GmlmError(f"{flag} {path} is a folder; give a file path, e.g. {path / 'out.txt'}")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise GmlmError(f"{flag} {path}: {folder} is a file, not a folder; choose another path")
    check_not_protected(path, flag, inputs)
    if path.exists() and not path.is_file():
        return  # a device or pipe, written directly
    if own is not None and path.exists() and not own(path):
        raise GmlmError(
            f"{flag} {path} exists and is not {what}; refusing to overwrite it: choose a new "
            "path, or move it away"
        )
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=folder)
    except OSError as err:
        raise GmlmError(
            f"{flag} {path}: cannot create files in {folder} ({err.strerror}); choose a "
            "writable location"
        ) from None
    os.close(fd)
    os.unlink(probe)
    for hook in OUTPUT_CHECKED:
        hook(path, flag, folder)


def check_output_files(
    outputs: Iterable[tuple[str, Path | None]], *, inputs: Inputs | None = None
) -> None:
    """:func:`check_output_file` for each output file a command was given, as (flag, path),
    None for one not given; two outputs that name one file (:func:`_same_file`) are refused
    too, since the second written would replace the first."""
    given = [(flag, Path(path)) for flag, path in outputs if path is not None]
    for i, (flag, path) in enumerate(given):
        for earlier_flag, earlier in given[:i]:
            if _same_file(path, earlier):
                raise GmlmError(f"{earlier_flag} and {flag} both name {path}; give two files")
        check_output_file(path, flag, inputs=inputs)


def check_output_folder(
    path: Path,
    flag: str,
    what: str,
    own: Callable[[Path], bool],
    *,
    inputs: Inputs | None = None,
    replace: bool = True,
) -> bool:
    """Whether the output folder `path` may be written, checked before any work: a new or
    empty folder may; one that holds `what` (`own` says so: an earlier output of the same
    command) only if `replace` (a command that resumes or reuses its own folder; `gmlm
    export` without --force does not); a file, or a folder holding anything else, never.
    :func:`check_not_protected` applies too. Returns whether `path` holds an earlier
    `what`."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise GmlmError(
            f"{flag} {path} exists and is not {what}: {path} is a file, not a folder; choose "
            "another path"
        )
    check_not_protected(path, flag, inputs)
    entries = sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE) if path.exists() else []
    if not entries:
        return False
    if not own(path):
        shown = ", ".join(entries[:5]) + (
            f" and {len(entries) - 5} more" if len(entries) > 5 else ""
        )
        raise GmlmError(
            f"{flag} {path} exists, is not empty and is not {what}; refusing to overwrite it "
            f"(it holds {shown}): choose a new or empty folder"
        )
    if not replace:
        raise GmlmError(
            f"{flag} {path} holds {what} written earlier; pass --force to replace it, or "
            "choose a new folder"
        )
    return True
