"""The setting of `gmlm translate` under torchrun (:mod:`gmlm.translation.sharded`), declared
once: its flag, help and default come from the field (:mod:`gmlm.cli.options`).

Torch-free, so that `gmlm translate --help` stays light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field

from gmlm.config import SENTENCES
from gmlm.settings import doc

# 500 lines: a 1,000-line test set still splits between 2 processes, and a chunk is under a
# minute of a small model's work on one core (little to redo after a crash).
CHUNK_LINES = 500


@dataclasses.dataclass(frozen=True)
class ShardSettings:
    """How `gmlm translate` shares a file between the processes of a torchrun job."""

    chunk_lines: int = field(
        default=CHUNK_LINES,
        metadata=doc(
            "under torchrun only: input lines per saved chunk (OUTPUT.chunks/chunk-NNNNN.txt), "
            "the unit of resuming and of sharing the file between the processes",
            range=SENTENCES,
        ),
    )


DEFAULT_SHARDING = ShardSettings()
