"""stages/NAME.json: what the pipeline writes when a stage finishes (its presence marks the
stage done)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gmlm.records import Record


@dataclass(frozen=True, kw_only=True)
class StageRecord(Record):
    """A finished stage: wall-clock `seconds` of its last invocation, when it `finished` (ISO
    time), the `host`, and the stage's `summary`. The summary stays a dict: each stage returns
    a few numbers of its own shape for people to read (pairs per split, best checkpoint, BLEU
    per system); the report reads only the trainer's total time, `train_seconds`."""

    stage: str
    seconds: float
    finished: str
    host: str
    summary: dict[str, Any]

    @property
    def train_seconds(self) -> float | None:
        """The trainer's own total across resumptions (training stages only)."""
        value = self.summary.get("train_seconds")
        return float(value) if isinstance(value, (int, float)) else None
