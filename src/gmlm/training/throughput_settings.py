"""The settings of `gmlm throughput` (:func:`gmlm.training.throughput.measure_throughput`),
each declared once: its flag, help and default come from the field (:mod:`gmlm.cli.options`).

Torch-free, so that `gmlm throughput --help` stays light.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field
from typing import Literal

from gmlm.config import TIMED, WARMUP, Range, check_settings
from gmlm.errors import GmlmError
from gmlm.settings import doc

# The precisions a training step can run in: fp32, or bf16 autocast.
TrainingPrecision = Literal["fp32", "bf16"]


GROUP = Range(ge=1, le=1_000)


@dataclasses.dataclass(frozen=True)
class ThroughputSettings:
    """How many steps `gmlm throughput` times, in which precisions (each field's help says
    what)."""

    steps: int = field(
        default=6, metadata=doc("timed samples per precision, each of --group steps", range=TIMED)
    )
    warmup: int = field(default=2, metadata=doc("untimed steps first", range=WARMUP))
    precisions: tuple[TrainingPrecision, ...] = field(
        default=("fp32", "bf16"),
        metadata=doc(
            "comma-separated training precisions to time: fp32 and/or bf16 autocast (fp32 "
            "alone where bf16 is emulated and slow)",
            flag="--precision",
        ),
    )
    group: int = field(
        default=1,
        metadata=doc(
            "steps per timed sample, timed between two waits for the device: on a GPU, "
            "more than 1 lets a step's launches overlap the previous step's work, as in "
            "training",
            range=GROUP,
        ),
    )

    def validate(self) -> None:
        """Every field within its range, and precisions among the training ones."""
        known = typing.get_args(TrainingPrecision)
        if not self.precisions or any(p not in known for p in self.precisions):
            raise GmlmError(
                f"precisions={tuple(self.precisions)}: give fp32 and/or bf16 (training precisions)"
            )
        check_settings(self)
        timed, most = self.steps * self.group, int(TIMED.le or 0)
        if timed > most:
            raise GmlmError(
                f"steps={self.steps} x group={self.group} = {timed:,} timed steps: at most {most:,}"
            )
