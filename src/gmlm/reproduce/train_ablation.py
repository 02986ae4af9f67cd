"""The training ablation's record (train_ablation/train_ablation.json) and how its rows are
read from a training run's metrics.

The `train_ablation` stage retrains PaDIR with each variant's settings (space-separated
`gmlm train` key=value overrides, each switching off a change of the `padir` stage's recipe)
for `steps` steps, in OUT/train_ablation/<slug>, and compares its validation at that step with
the `padir` run's own validation at the same step. With a learning-rate schedule that
`max_steps` does not shape (anything but cosine; the stage refuses cosine), the same seed and
data, a variant's first `steps` steps differ from the main run's only by the variant's
settings, so the difference is its effect at that budget: one seed, validation BLEU on the
trainer's `valid_sentences` first sentences (noisy: about +-1 BLEU on 200), loss on the whole
split. Far from the end of the main run's training: an early-training effect, not the final one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gmlm.errors import GmlmError
from gmlm.records import OMIT_NONE, Record
from gmlm.reproduce.metrics import validations


@dataclass(frozen=True, kw_only=True)
class TrainAblationRow(Record):
    """One run's validation at the compared step: `variant` "" for the main PaDIR run;
    `settings` its key=value overrides beyond the padir stage's; `precision` what it trained
    in (for the main run, what its metrics.jsonl records at the compared step, which the
    variants then train in; None when it records none)."""

    variant: str
    settings: tuple[str, ...]
    bleu: float | None = field(default=None, metadata=OMIT_NONE)
    loss: float
    token_loss: float | None = field(default=None, metadata=OMIT_NONE)
    length_loss: float | None = field(default=None, metadata=OMIT_NONE)
    precision: str | None = field(default=None, metadata=OMIT_NONE)
    folder: str


@dataclass(frozen=True, kw_only=True)
class TrainAblationResult(Record):
    """Every variant at `steps` steps against the main PaDIR run (`baseline`) at that step."""

    steps: int
    baseline: TrainAblationRow
    rows: tuple[TrainAblationRow, ...]


def variant_overrides(variant: str) -> tuple[str, ...]:
    """The key=value overrides of a variant ("padir.length_weight=1 model.dropout=0.1")."""
    items = tuple(variant.split())
    bad = [item for item in items if "=" not in item or item.startswith("=")]
    if not items or bad:
        raise GmlmError(
            f"train_ablation variant {variant!r}: give space-separated key=value training "
            "settings, e.g. 'model.relative_bias=false'"
        )
    return items


def slug(variant: str) -> str:
    """A folder name for a variant: its settings with every other character as '_'."""
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", variant).strip("_")[:120]


def row_at(folder: Path, step: int, variant: str, overrides: tuple[str, ...]) -> TrainAblationRow:
    """The validation of the run in `folder` at `step`, and the precision it trained in up to
    there, from its metrics.jsonl (the last record of that step wins: a resumed run may repeat
    it)."""
    from gmlm.training.precision import trained_precision

    path = folder / "metrics.jsonl"
    found = [record for record in validations(path) if int(record["step"]) == step]
    if not found:
        raise GmlmError(
            f"{path}: no validation at step {step}; train_ablation.steps must be a step at "
            "which the padir run validated (a multiple of its valid_every that it reached)"
        )
    record = found[-1]
    return TrainAblationRow(
        variant=variant,
        settings=overrides,
        bleu=_number(record.get("valid_bleu")),
        loss=float(record["valid_loss"]),
        token_loss=_number(record.get("valid_token_loss")),
        length_loss=_number(record.get("valid_length_loss")),
        precision=trained_precision(path, step),
        folder=str(folder),
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
