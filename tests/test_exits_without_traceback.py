"""Failures on the way out are one-line errors, never tracebacks: a full disk while a command
takes its folder's lock or writes its results, a user's string that does not parse, and a
computation that needs more memory than the process may have (its address-space limit
included). The disk is made full by making the system call fail (os.write of the lock file,
os.fsync of every file written atomically), and the limit is a patched getrlimit: the test
process's own limits are never lowered."""

from __future__ import annotations

import errno
import os
import resource
from pathlib import Path

import pytest

import gmlm.theory.bench
from gmlm.io import LOCK_FILE
from gmlm.memory import available_bytes
from tests.helpers.cli import exit_status

FULL = "No space left on device"
# The theory stage of `gmlm reproduce` at its smallest: a second or two.
TINY_THEORY = [
    "theory.verify_max_n=2",
    "theory.repetitions=1",
    "theory.sample_sizes=[100]",
    "theory.figure3_couplings=[1]",
    "theory.figure3_ks=[1]",
    "theory.figure3_budget=5",
]
TINY_FIGURE3 = ["--budget", "5", "--reps", "1", "--ks", "1", "--couplings", "1"]

# Each row: the command ({out} its output folder), the system call made to fail with ENOSPC
# (None: none), and what the one-line error must say.
TABLE: dict[str, tuple[list[str], str | None, str]] = {
    "theory verify, lock": (["theory", "verify", "--max-n", "2", "--out", "{out}"], "write", FULL),
    "theory verify, result": (
        ["theory", "verify", "--max-n", "2", "--out", "{out}"],
        "fsync",
        "cannot write {out}/verify.json: " + FULL,
    ),
    "theory figure3, result": (
        ["theory", "figure3", *TINY_FIGURE3, "--out", "{out}"],
        "fsync",
        "cannot write {out}/figure3.csv: " + FULL,
    ),
    "reproduce, lock": (
        ["reproduce", "--stages", "theory", "--no-progress", "--out", "{out}", *TINY_THEORY],
        "write",
        FULL,
    ),
    "reproduce, its first record": (
        ["reproduce", "--stages", "theory", "--no-progress", "--out", "{out}", *TINY_THEORY],
        "fsync",
        "cannot write {out}/reproduce.yaml: " + FULL,
    ),
    "data prepare, lock": (
        ["data", "prepare", "--corpus", "files:a.de,a.en", "--out", "{out}"],
        "write",
        FULL,
    ),
    "loadtest --serve, an open quote": (
        ["loadtest", "--serve", '"unterminated', "--output", "{out}/load.json"],
        None,
        "--serve '\"unterminated': cannot split it into arguments",
    ),
    "loadtest --options, not JSON": (
        ["loadtest", "--options", "ar={beam", "--output", "{out}/load.json"],
        None,
        "--options 'ar={beam': not JSON",
    ),
    "reproduce override, not YAML": (
        ["reproduce", "--out", "{out}", "theory.seed=[1"],
        None,
        "cannot parse value",
    ),
}


@pytest.mark.parametrize("case", list(TABLE))
def test_failures_on_the_way_out_are_one_line_errors(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, failing, message = TABLE[case]
    out = tmp_path / "out"
    if failing is not None:
        real = getattr(os, failing)

        def full(fd: int, *args: object) -> object:
            if fd in (0, 1, 2):  # the terminal is not the full disk
                return real(fd, *args)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, failing, full)
    monkeypatch.chdir(tmp_path)
    status = exit_status([arg.replace("{out}", str(out)) for arg in argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert message.replace("{out}", str(out)) in err, err
    assert "Traceback" not in err
    assert not (out / LOCK_FILE).exists()  # no lock file left behind, empty or half-written
    if failing == "write":  # the folder the lock created goes with it
        assert not out.exists()


def _mapped_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _address_space_limit(monkeypatch: pytest.MonkeyPatch, headroom: int) -> None:
    """Make getrlimit report an address-space limit `headroom` bytes above what the process
    has mapped now (other limits as they are)."""
    real = resource.getrlimit
    limit = _mapped_bytes() + headroom

    def getrlimit(which: int) -> tuple[int, int]:
        return (limit, resource.RLIM_INFINITY) if which == resource.RLIMIT_AS else real(which)

    monkeypatch.setattr(resource, "getrlimit", getrlimit)


@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="needs Linux /proc")
def test_memory_check_honours_the_address_space_limit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gmlm theory poincare` refuses, before it starts, a computation beyond RLIMIT_AS even
    where the machine has the memory free."""
    _address_space_limit(monkeypatch, 64 * 2**20)
    assert available_bytes() <= 64 * 2**20

    def never(*args: object, **kwargs: object) -> None:
        pytest.fail("the computation started despite the memory check")

    monkeypatch.setattr(gmlm.theory.bench, "poincare_constant", never)
    status = exit_status(["theory", "poincare", "--n", "21", "--k", "21"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "needs about" in err and "lower --n" in err, err
    assert "Traceback" not in err


def test_running_out_of_memory_midway_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An allocation that fails after the check (numpy's ArrayMemoryError is a MemoryError)
    is a one-line error that says what to lower."""

    def allocation_fails(*args: object, **kwargs: object) -> None:
        raise MemoryError("Unable to allocate 128. MiB for an array with shape (1, 16777216)")

    monkeypatch.setattr(gmlm.theory.bench, "poincare_constant", allocation_fails)
    status = exit_status(["theory", "poincare", "--n", "6", "--k", "2"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "ran out of memory (Unable to allocate 128. MiB" in err and "lower --n" in err, err
    assert "Traceback" not in err
