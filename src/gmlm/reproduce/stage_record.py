"""stages/NAME.json: what the pipeline writes when a stage finishes (its presence marks the
stage done)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gmlm.records import Record

STAND_IN = "stand_in"  # the data stage's summary key: why the examples stood in (StageRecord)
# A training stage's summary key when it was given a checkpoint: the checkpoint's digest
# (`gmlm.checkpoint.fingerprint.checkpoint_fingerprint`) when the stage used it.
FINGERPRINT = "fingerprint"
# The compare stage's summary key: the digest of each checkpoint of `compare.against`, by the
# path the config gives.
FINGERPRINTS = "fingerprints"
# The data stage's summary key: the size and modification time of each file it read, by path
# (gmlm.reproduce.data_inputs.file_signature).
INPUTS = "inputs"


@dataclass(frozen=True, kw_only=True)
class StageRecord(Record):
    """A finished stage: wall-clock `seconds` of its last invocation, when it `finished` (ISO
    time), the `host`, and the stage's `summary`. The summary stays a dict: each stage returns
    a few numbers of its own shape for people to read (pairs per split, best checkpoint, BLEU
    per system); the report reads only the trainer's total time, `train_seconds`, and the
    data stage's `stand_in`, and the pipeline the digests of given checkpoints (`fingerprint`,
    `fingerprints`) and the data stage's `inputs`."""

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

    @property
    def stand_in(self) -> str | None:
        """Why the data stage prepared gmlm's example sentences instead of the corpus (a
        sentence for people; data stage only), or None when it prepared the corpus."""
        value = self.summary.get(STAND_IN)
        return value if isinstance(value, str) and value else None

    @property
    def fingerprint(self) -> str | None:
        """The digest of the checkpoint a training stage was given, as it was when the stage
        used it; None for a trained one, or one recorded before gmlm kept digests."""
        value = self.summary.get(FINGERPRINT)
        return value if isinstance(value, str) and value else None

    @property
    def fingerprints(self) -> dict[str, str]:
        """The digests of the checkpoints the compare stage was given, by the path its config
        gives, as they were when it compared them; empty for another stage, or a record from
        before gmlm kept them."""
        value = self.summary.get(FINGERPRINTS)
        if not isinstance(value, dict):
            return {}
        return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}

    @property
    def inputs(self) -> dict[str, list[int] | None] | None:
        """The size and modification time of each file the data stage read, by path, as they
        were when it ran; None for another stage, or a record from before gmlm kept them."""
        value = self.summary.get(INPUTS)
        if not isinstance(value, dict):
            return None
        return {k: v if isinstance(v, list) else None for k, v in value.items()}
