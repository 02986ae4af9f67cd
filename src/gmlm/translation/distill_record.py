"""``distill.json``: how a distilled dataset was made (:func:`gmlm.translation.distill.distill`
writes it beside the dataset's manifest, and reads its settings back to decide whether a
finished distillation can be reused)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gmlm.records import FLATTEN, Record


@dataclass(frozen=True)
class RecordedRate:
    """The teacher's time and rate over every chunk whose time was recorded, in every run and
    process: seconds, sentences, and sentences/s (None before any chunk was timed)."""

    teacher_seconds: float
    timed_sentences: int
    sentences_per_s: float | None


@dataclass(frozen=True)
class ChunkTiming:
    """The chunks of the training sources, how many an earlier run had translated (this
    process's share, summed over the processes at the end), the sentences translated and the
    wall seconds of this run, and the recorded rate."""

    chunks: int
    chunks_resumed: int
    sentences_this_run: int
    seconds_this_run: float
    rate: RecordedRate = field(metadata=FLATTEN)


@dataclass(frozen=True)
class DistillCounts:
    """What happened to the training sources: translated, or skipped as empty or longer than
    the teacher takes; teacher outputs that came out empty; pairs the prepared dataset kept
    and dropped (its length and ratio filters)."""

    train_sources: int
    translated: int
    empty_sources: int
    over_length_sources: int
    empty_outputs: int
    train_pairs_kept: int
    train_pairs_dropped: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class DistillRecord(Record):
    """The teacher and data, the settings the outputs depend on, where and how fast it ran.

    `settings` is :func:`gmlm.translation.distill.distill_settings`: open-ended (the teacher's
    search options, whatever they are) because it is compared whole, never read by key."""

    settings: dict[str, Any]
    teacher: str
    teacher_step: int | None
    data: str
    beam: int
    precision: str
    batch_size: int | None
    max_tokens: int | None
    threads: int
    device: str
    torch: str
    gmlm: str
    cpu: str
    counts: DistillCounts
    timing: ChunkTiming = field(metadata=FLATTEN)
    build_seconds: float
    created_utc: str

    @classmethod
    def recorded_settings(cls, path: Path) -> dict[str, Any] | None:
        """The `settings` of the record at `path`, or None when there is none to read. Reuse
        depends on the settings alone, so a record whose other keys come from another version
        of gmlm still says which settings made its dataset."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        settings = data.get("settings") if isinstance(data, dict) else None
        return settings if isinstance(settings, dict) else None
