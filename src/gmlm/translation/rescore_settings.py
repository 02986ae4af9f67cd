"""The settings of `gmlm translate --rescore` (:mod:`gmlm.decoding.rescoring`), declared
once: their flags, help and defaults come from the fields (:mod:`gmlm.cli.options`).

Torch-free, so that `gmlm translate --help` stays light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path

from gmlm.decoding.options import RESCORE_WEIGHT
from gmlm.settings import doc


@dataclasses.dataclass(frozen=True)
class RescoreSettings:
    """Which autoregressive checkpoint rescores a PaDIR checkpoint's candidates, and how much
    its score weighs."""

    rescore: Path | None = field(
        default=None,
        metadata=doc(
            "an autoregressive checkpoint of the same tokenizer that scores each PaDIR "
            "candidate (one teacher-forced pass over them all, no search) before the final "
            "choice: the candidate with the highest PaDIR score plus --rescore-weight times "
            "its mean log-probability per token wins; costs that model's encoder and one "
            "decoder pass, and decodes without CUDA graphs; pruning (--prune-after) still "
            "ranks by PaDIR's score, so --prune-after 0 leaves it every candidate (not under "
            "torchrun)"
        ),
    )
    rescore_weight: float = field(
        default=1.0,
        metadata=doc(
            "weight of the --rescore model's mean log-probability per token", range=RESCORE_WEIGHT
        ),
    )
