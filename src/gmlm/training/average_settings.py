"""The settings of `gmlm average` (gmlm.training.averaging), torch-free so that the command
line's parser imports them without the models."""

from __future__ import annotations

from dataclasses import dataclass, field

from gmlm.config import TRAINING_STEPS, check_settings
from gmlm.errors import GmlmError
from gmlm.settings import doc


@dataclass(frozen=True)
class AverageSettings:
    """Which kept steps `gmlm average` averages (each field's help says what)."""

    first: int | None = field(
        default=None,
        metadata=doc("first step averaged (default: the oldest kept)", range=TRAINING_STEPS),
    )
    last: int | None = field(
        default=None,
        metadata=doc("last step averaged (default: the newest kept)", range=TRAINING_STEPS),
    )

    def validate(self) -> None:
        check_settings(self)
        if self.first is not None and self.last is not None and self.first > self.last:
            raise GmlmError(f"--first {self.first} is after --last {self.last}")
