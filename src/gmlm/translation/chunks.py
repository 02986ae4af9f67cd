"""Translation work saved in chunks, resumable and shared between processes.

A long translation (a distillation, a large file) is cut into chunks of consecutive items;
each finished chunk is written atomically to ``WORK/chunk-NNNNN.txt`` (one output line per
item) and its time appended to ``WORK/times.jsonl``. ``WORK/settings.json`` holds what the
outputs depend on: chunks made under other settings are discarded, never mixed. An
interrupted run resumes by skipping the chunks already there.

Under ``torchrun`` (several processes, on one machine or several sharing the folder), process
r of W does the chunks i with i % W == r; the job's rank 0 prepares the folder, waits for all
and reads every chunk back, so the result is one process's. A process that fails tells the
others (:func:`on_every_process`), so that none waits for it forever.

Used by :mod:`gmlm.translation.distill` and :mod:`gmlm.translation.sharded`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gmlm.distributed import (
    DistInfo,
    all_reduce_sum,
    init_distributed,
    pick_device,
    process_device,
)
from gmlm.errors import GmlmError
from gmlm.io import atomic_open, atomic_write_json, make_dirs

SETTINGS_FILE = "settings.json"
TIMES_FILE = "times.jsonl"

Log = Callable[[str], None]
T = TypeVar("T")


def chunk_path(work: Path, index: int) -> Path:
    return work / f"chunk-{index:05d}.txt"


def read_chunk(path: Path, size: int) -> list[str] | None:
    """The outputs in a finished chunk file, or None if it is missing or does not hold
    `size` lines (it then gets translated again)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.split("\n")
    if lines[-1] != "" or len(lines) - 1 != size:
        return None
    return lines[:-1]


def write_chunk(work: Path, index: int, outputs: Sequence[str], seconds: float) -> None:
    """Save chunk `index` (one line per output; none may hold a line break) atomically, then
    record its time."""
    with atomic_open(chunk_path(work, index), "w") as handle:
        handle.write("".join(line + "\n" for line in outputs))
    with open(work / TIMES_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"chunk": index, "sentences": len(outputs), "s": seconds}))
        handle.write("\n")


def prepare_work(
    work: Path, settings: dict[str, Any], say: Log, *, flag: str, depends_on: str
) -> bool:
    """Make `work` hold only chunks made with `settings` (and no temporary leftovers); `flag`
    names the folder for messages, `depends_on` says in words what the settings hold.
    Returns whether chunks of other settings (or no settings) were there and are gone."""
    settings = json.loads(json.dumps(settings))  # as read back: tuples are lists
    make_dirs(work, flag)
    for stale in work.glob(".*.tmp"):
        stale.unlink(missing_ok=True)
    saved_path = work / SETTINGS_FILE
    saved = None
    if saved_path.is_file():
        try:
            saved = json.loads(saved_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            saved = None
    if saved == settings:
        return False
    old = sorted(work.glob("chunk-*.txt"))
    if old:
        say(
            f"{work}: {len(old)} chunk(s) of an earlier run with other settings ({depends_on}) "
            "discarded"
        )
    for path in old:
        path.unlink()
    (work / TIMES_FILE).unlink(missing_ok=True)
    atomic_write_json(saved_path, settings)
    return True


def recorded_time(work: Path) -> tuple[float, int]:
    """Seconds and sentences over every chunk whose time was recorded (all runs, each chunk
    once)."""
    seconds, sentences = 0.0, 0
    try:
        lines = (work / TIMES_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    seen: set[int] = set()
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        if row["chunk"] in seen:
            continue
        seen.add(row["chunk"])
        seconds += row["s"]
        sentences += row["sentences"]
    return seconds, sentences


def join_shards(device: str) -> DistInfo:
    """Under `torchrun` with several processes, join their group (gloo on the CPU, NCCL on
    GPUs): each process then does its share of the chunks; else one process does all."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return DistInfo()
    return init_distributed(process_device(pick_device(device)))


def shard_device(device: str, shard: DistInfo) -> str:
    """Each process's device: under torchrun a GPU becomes its local rank's own."""
    return str(process_device(pick_device(device))) if shard.active else device


def my_chunks(count: int, shard: DistInfo) -> list[int]:
    """The indices of this process's chunks among `count`."""
    return list(range(shard.rank, count, shard.world_size))


def raise_if_any_failed(error: BaseException | None, shard: DistInfo) -> None:
    """Every process of the job calls this after its share, with the exception it met (or
    None): the one that failed raises its own error, the others a GmlmError saying that one
    failed; with no failure, nothing (one process: re-raises `error`, if any)."""
    if shard.active:
        failed = all_reduce_sum([1.0 if error is not None else 0.0], shard)
        if error is None and failed[0] > 0:
            raise GmlmError(
                f"{int(failed[0])} other process(es) of this torchrun job failed (see their "
                "messages); the chunks finished so far are kept: run the same command again "
                "to resume"
            )
    if error is not None:
        raise error


def on_every_process(run: Callable[[], T], shard: DistInfo) -> T:
    """`run()`'s result once every process of the job has done its own call (a step that
    other processes wait for): an exception in any process raises in all of them
    (:func:`raise_if_any_failed`), so that none waits for the failed one forever."""
    try:
        result = run()
    except Exception as exc:
        raise_if_any_failed(exc, shard)
        raise
    raise_if_any_failed(None, shard)
    return result
