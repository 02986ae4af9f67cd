"""The settings of `gmlm analyze attention|length|ablation|calibrate`, each declared once: the
flags are derived from the fields (:mod:`gmlm.cli.options`), and the reproduce pipeline's
attention, length, ablation and calibrate stages are these classes plus their switch and what
the stage fixes (:mod:`gmlm.reproduce.config`). The PaDIR decoding itself is the
checkpoint's, changed by the RefinementOptions flags, as in `gmlm translate`.

Torch-free, so that `gmlm analyze --help` stays light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field

from gmlm.config import BATCH_SIZE, SENTENCES, Range, check_settings, field_range
from gmlm.decoding.options import (
    ABLATION_VARIANTS,
    CALIBRATION_MIN_GAIN,
    MIN_GAIN,
    RefinementOptions,
    SearchOptions,
    parse_variant,
)
from gmlm.settings import doc

# The first N sentences of a split; 0: all of it.
FIRST_SENTENCES = Range(ge=0, le=SENTENCES.le, note="0: the whole split")


@dataclasses.dataclass(frozen=True)
class AnalysisSettings:
    """The sentences an analysis decodes, and how many at once (`gmlm analyze attention`)."""

    split: str = field(default="test", metadata=doc("split to decode"))
    sentences: int = field(
        default=0, metadata=doc("only the first N sentences (0: all)", range=FIRST_SENTENCES)
    )
    batch_size: int = field(default=32, metadata=doc("sentences per batch", range=BATCH_SIZE))

    def validate(self) -> None:
        check_settings(self)


@dataclasses.dataclass(frozen=True)
class LengthSettings(AnalysisSettings):
    """`gmlm analyze length`: also the selection weights of the top-B decoding."""

    length_weights: tuple[float, ...] = field(
        default=(0.0, 0.5),
        metadata=doc(
            "comma-separated selection weights of the length log-probability for the top-B "
            "decoding (0 is the paper's selection)",
            range=field_range(RefinementOptions, "length_weight"),
        ),
    )


@dataclasses.dataclass(frozen=True)
class AblationSettings(AnalysisSettings):
    """`gmlm analyze ablation`: on validation data, the default decoding then each variant."""

    split: str = field(default="valid", metadata=doc("split to decode"))
    variants: tuple[str, ...] = field(
        default=ABLATION_VARIANTS,
        metadata=doc(
            "a row's decoding settings, space-separated field=value of the PaDIR options "
            "(field names as in Python: selection=sum, dedup_final=false, 'length_beam=1 "
            "length_offsets=[-2,-1,1,2]'); repeat for more rows",
            flag="--variant",
        ),
    )

    def validate(self) -> None:
        """Also every variant readable (an error names it)."""
        super().validate()
        for variant in self.variants:
            parse_variant(variant)


@dataclasses.dataclass(frozen=True)
class CalibrationSettings(AnalysisSettings):
    """`gmlm analyze calibrate`: on validation data, a length setting chosen for a checkpoint
    (the setting and its values: the command's --setting and --values)."""

    split: str = field(default="valid", metadata=doc("split to decode"))
    batch_size: int = field(default=64, metadata=doc("sentences per batch", range=BATCH_SIZE))
    ar_beam: int = field(
        default=5,
        metadata=doc(
            "AR checkpoints: the beam size", flag="--beam", range=field_range(SearchOptions, "beam")
        ),
    )
    min_gain: float = field(
        default=CALIBRATION_MIN_GAIN,
        metadata=doc(
            "BLEU the best value must gain over the checkpoint's current value to be kept",
            range=MIN_GAIN,
        ),
    )
