"""Memory bounds: a computation's estimated peak, checked against what there is before it starts.

A setting within its declared range can still ask for more memory than the machine has when it
multiplies with others (beams x sentences x vocabulary, PaDIR's candidates x lengths, the
theory's 2^N states). Each such computation estimates what it needs from its settings, beside
its code (:func:`gmlm.decoding.autoregressive.search_bytes`,
:func:`gmlm.decoding.refinement.refinement_bytes`, :func:`gmlm.theory.bench.poincare_bytes`,
:func:`gmlm.theory.figures.estimation_bytes`), and calls :func:`check_memory` first: an
estimate above what the process may still allocate is a :class:`GmlmError` saying what it
would need, what there is and which setting to lower, instead of minutes of swapping and the
kernel's out-of-memory killer.

What there is: on the CPU the kernel's MemAvailable, lowered to the headroom under the
cgroup's memory limit where one is set (containers) and to that under the process's
address-space limit where one is set (``ulimit -v``, RLIMIT_AS); on a GPU what the driver
reports free plus what torch's caching allocator holds unused. Estimates count the largest
tensors alive at once, so they are lower bounds of the true peak: a request that fails the
check cannot succeed.
"""

from __future__ import annotations

import os
from pathlib import Path

from gmlm.errors import GmlmError

# Below this an estimate is not checked: every machine gmlm runs on has it free, and asking the
# kernel (or the GPU driver, which synchronises) on every small batch would slow the latency
# benchmarks down.
UNCHECKED_BYTES = 256 * 2**20


class MemoryLimitError(GmlmError):
    """A computation would need more memory than this machine has; the message says how much."""


def format_bytes(count: float) -> str:
    """`count` bytes in binary units: "512 B", "3.2 GiB", "8.6 EiB"."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    value = float(count)
    for unit in units:
        if abs(value) < 1024 or unit == units[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_headroom() -> int | None:
    """Bytes left under this process's cgroup (v2) memory limit, or None without a limit."""
    try:
        entries = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for entry in entries:
        if not entry.startswith("0::"):
            continue
        folder = Path("/sys/fs/cgroup") / entry[3:].lstrip("/")
        try:
            limit = (folder / "memory.max").read_text().strip()
            used = int((folder / "memory.current").read_text())
        except (OSError, ValueError):
            return None
        return None if limit == "max" else max(int(limit) - used, 0)
    return None


def _address_space_headroom() -> int | None:
    """Bytes left under this process's address-space limit (RLIMIT_AS, `ulimit -v`), or None
    without a limit. The limit counts every byte the process has mapped, used or not, so the
    headroom is the limit less the process's virtual size now."""
    try:
        import resource
    except ImportError:  # not a Unix system
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pages = 0
    mapped = pages * os.sysconf("SC_PAGE_SIZE")
    return max(soft - mapped, 0)


def available_bytes(device: str = "cpu") -> int | None:
    """Bytes this process may still allocate on `device` ("cpu", "cuda" or "cuda:N"; see the
    module docstring); None where this platform does not say."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return None
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        index = torch.device(device).index
        unused = torch.cuda.memory_reserved(index) - torch.cuda.memory_allocated(index)
        return int(free + unused)
    limits = (_meminfo_available(), _cgroup_headroom(), _address_space_headroom())
    found = [n for n in limits if n is not None]
    return min(found) if found else None


def check_memory(
    need: float, what: str, fix: str, device: str = "cpu", available: int | None = None
) -> None:
    """Raise :class:`MemoryLimitError` when `need` bytes (an estimate of `what`, e.g. "beam
    search of 32 sentences with beam=100000") exceed `available` (default: what `device` has
    free now); the message ends with `fix`, the settings to lower. Nothing is checked below
    UNCHECKED_BYTES, nor where the platform does not say what is free."""
    if need < UNCHECKED_BYTES:
        return
    free = available_bytes(device) if available is None else available
    if free is None or need <= free:
        return
    where = "" if device == "cpu" else f" on {device}"
    raise MemoryLimitError(
        f"{what} needs about {format_bytes(need)} of memory, but {format_bytes(free)} is "
        f"available{where}; {fix}"
    )
