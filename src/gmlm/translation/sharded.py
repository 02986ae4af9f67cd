"""`gmlm translate` of a file shared between the processes of a `torchrun` job.

    torchrun --nproc_per_node 4 -m gmlm translate --checkpoint CKPT --input big.de --output big.en

The input is cut into chunks of consecutive lines (:class:`ShardSettings`); process r of W
translates the chunks i with i % W == r, each saved on its own in ``OUTPUT.chunks/``
(:mod:`gmlm.translation.chunks`), and rank 0 writes OUTPUT in input order once every chunk is
there, then removes the folder. A line's random tokens are keyed by its own ids, not by where
it stands (:mod:`gmlm.decoding.draws`), so the output is the one process's, byte for byte.
The same command run again after an interruption resumes from the chunks saved; chunks made
with another checkpoint, input or decoding settings are discarded. Rank 0 holds the folder's
lock: a second job writing the same OUTPUT fails at once. A process that fails stops the
others with a message, keeping the chunks done.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gmlm.checkpoint.fingerprint import checkpoint_fingerprint
from gmlm.checkpoint.loading import resolve_checkpoint
from gmlm.distributed import DistInfo, all_reduce_sum, barrier, shutdown
from gmlm.errors import GmlmError
from gmlm.io import atomic_open, check_output_folder
from gmlm.locking import folder_lock
from gmlm.translation.chunks import (
    SETTINGS_FILE,
    chunk_path,
    join_shards,
    my_chunks,
    on_every_process,
    prepare_work,
    read_chunk,
    shard_device,
    write_chunk,
)
from gmlm.translation.language_check import LanguageCheck
from gmlm.translation.shard_settings import DEFAULT_SHARDING, ShardSettings
from gmlm.translation.translator import Translator, load

WORK_SUFFIX = ".chunks"
FORMAT_VERSION = 1

Log = Callable[[str], None]


def under_torchrun() -> bool:
    """Whether this process is one of several that `torchrun` started."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def work_folder(output: Path) -> Path:
    """Where the chunks of `output` are saved: beside it, ``OUTPUT.chunks``."""
    return output.with_name(output.name + WORK_SUFFIX)


@dataclass(frozen=True)
class ShardedRun:
    """What the job did (rank 0's view; the counts summed over the processes): `seconds` from
    the start of the translation to the output written; `translated_now` lines translated by
    this run (the rest were resumed); `padding_content`/`padding_computed`: PaDIR's decoder
    row-positions (0 for an AR model)."""

    lines: int
    translated_now: int
    chunks: int
    processes: int
    seconds: float
    padding_content: int
    padding_computed: int


def translate_file(
    checkpoint: str | Path,
    lines: Sequence[str],
    output: Path,
    *,
    origin: str,
    sharding: ShardSettings = DEFAULT_SHARDING,
    device: str = "auto",
    cuda_graphs: bool | None = None,
    say: Log = print,
    check_language: LanguageCheck = "warn",
    **translate_args: Any,
) -> ShardedRun | None:
    """Translate `lines` (read from `origin`) into the file `output` with the processes of this
    torchrun job (one process: all of it), chunk by chunk, resumable (see the module
    docstring). `check_language`: the input language check of the whole input, before any
    chunk (:meth:`Translator.translate`'s; rank 0 warns, "strict" fails every process).
    `translate_args` go to :meth:`Translator.translate` (decoding overrides, batch_size,
    max_tokens, seed, precision, on_over_length). Returns what was done on rank 0, None on the
    other ranks."""
    shard = join_shards(device)
    try:
        return _translate_file(
            checkpoint,
            lines,
            output,
            origin=origin,
            sharding=sharding,
            device=shard_device(device, shard),
            cuda_graphs=cuda_graphs,
            say=say if shard.is_main else (lambda _msg: None),
            shard=shard,
            check_language=check_language,
            translate_args=translate_args,
        )
    finally:
        shutdown(shard)


def _translate_file(
    checkpoint: str | Path,
    lines: Sequence[str],
    output: Path,
    *,
    origin: str,
    sharding: ShardSettings,
    device: str,
    cuda_graphs: bool | None,
    say: Log,
    shard: DistInfo,
    check_language: LanguageCheck,
    translate_args: dict[str, Any],
) -> ShardedRun | None:
    start = time.perf_counter()
    work = work_folder(output)
    size = sharding.chunk_lines
    chunks = [range(i, min(i + size, len(lines))) for i in range(0, len(lines), size)]
    with contextlib.ExitStack() as held:

        def setup() -> Translator:
            translator = load(checkpoint, device=device, cuda_graphs=cuda_graphs)
            quiet = not shard.is_main and check_language == "warn"  # rank 0 warns
            translator.check_language(lines, "off" if quiet else check_language, origin)
            if shard.is_main:  # rank 0 makes the folder ready and holds it for the job
                _check_work(work, output)
                held.enter_context(folder_lock(work, f"--output {output}"))
                settings = _settings(checkpoint, translator, lines, size, translate_args)
                what = "checkpoint, input or decoding settings"
                prepare_work(work, settings, say, flag=f"--output {output}", depends_on=what)
            return translator

        translator = on_every_process(setup, shard)
        mine = my_chunks(len(chunks), shard)
        todo = [i for i in mine if read_chunk(chunk_path(work, i), len(chunks[i])) is None]
        resumed = len(mine) - len(todo)
        say(f"{checkpoint}: {translator.describe()}")
        say(
            f"translating {len(lines):,} lines of {origin} in {len(chunks)} chunks of up to "
            f"{size} lines"
            + (f", {shard.world_size} processes" if shard.active else "")
            + (f"; resuming: {resumed} of {len(mine)} chunks saved in {work}" if resumed else "")
        )

        def translate_mine() -> int:
            for index in todo:
                chunk = chunks[index]
                chunk_start = time.perf_counter()
                outputs = translator.translate(
                    [lines[i] for i in chunk], origin=origin, check_language="off", **translate_args
                )
                write_chunk(work, index, outputs, time.perf_counter() - chunk_start)
            return sum(len(chunks[i]) for i in todo)

        translated = on_every_process(translate_mine, shard)
        padding = translator.padding
        counts = [float(translated), float(padding.content), float(padding.computed)]
        translated_now, content, computed = (int(v) for v in all_reduce_sum(counts, shard))
        barrier(shard)  # every chunk is written
        if not shard.is_main:
            return None
        merged = []
        for index, chunk in enumerate(chunks):
            done = read_chunk(chunk_path(work, index), len(chunk))
            if done is None:
                raise GmlmError(f"{chunk_path(work, index)}: missing after every process ended")
            merged += done
        with atomic_open(output, "w") as handle:
            handle.write("".join(line + "\n" for line in merged))
    shutil.rmtree(work, ignore_errors=True)  # after the lock is released: the output is there
    return ShardedRun(
        lines=len(lines),
        translated_now=translated_now,
        chunks=len(chunks),
        processes=shard.world_size,
        seconds=time.perf_counter() - start,
        padding_content=content,
        padding_computed=computed,
    )


def _check_work(work: Path, output: Path) -> None:
    """The chunks folder is new, empty or an earlier run's of this command; never anything
    else."""
    check_output_folder(
        work,
        "--output",
        f"the saved chunks of a translation into {output} (run in progress or interrupted)",
        lambda folder: (folder / SETTINGS_FILE).is_file(),
    )


def _settings(
    checkpoint: str | Path,
    translator: Translator,
    lines: Sequence[str],
    chunk_lines: int,
    translate_args: dict[str, Any],
) -> dict[str, Any]:
    """Everything the chunks' outputs depend on (batching, threads and device only change the
    speed, or float rounding where two tokens nearly tie)."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8", "surrogatepass") + b"\n")
    decoding = {k: v for k, v in translate_args.items() if k not in ("batch_size", "max_tokens")}
    overrides = {
        k: v for k, v in decoding.items() if k not in ("seed", "precision", "on_over_length")
    }
    return {
        "format_version": FORMAT_VERSION,
        "checkpoint": checkpoint_fingerprint(resolve_checkpoint(checkpoint)),
        "input_sha256": digest.hexdigest(),
        "lines": len(lines),
        "chunk_lines": chunk_lines,
        "options": asdict(translator.options(**overrides)),
        "seed": decoding.get("seed", 0),
        "precision": decoding.get("precision", "fp32"),
        "on_over_length": decoding.get("on_over_length", "error"),
    }


__all__ = ["ShardedRun", "translate_file", "under_torchrun", "work_folder"]
