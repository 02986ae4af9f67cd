"""The settings of `gmlm analyze attention|length|ablation|calibrate|table1`, each declared
once: the flags are derived from the fields (:mod:`gmlm.cli.options`), and the reproduce
pipeline's attention, length, ablation and calibrate stages are these classes plus their
switch and what the stage fixes (:mod:`gmlm.reproduce.config`). The PaDIR decoding itself is the
checkpoint's, changed by the RefinementOptions flags, as in `gmlm translate`.

Torch-free, so that `gmlm analyze --help` stays light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path

from gmlm.config import BATCH_SIZE, SEED, SENTENCES, Range, check_settings, field_range
from gmlm.decoding.options import (
    ABLATION_VARIANTS,
    CALIBRATION_MIN_GAIN,
    MIN_GAIN,
    PAPER_BEAM,
    Precision,
    RefinementOptions,
    SearchOptions,
    parse_variant,
)
from gmlm.errors import GmlmError
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
            range=field_range(RefinementOptions, "length_score_weight"),
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
            "(field names as in Python: selection=sum, dedup=false, 'length_beam=1 "
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
class ComparisonSettings(AnalysisSettings):
    """`gmlm analyze compare`: on validation data, checkpoints against the first."""

    split: str = field(default="valid", metadata=doc("split to decode"))
    against: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "a checkpoint (or run folder) to compare with --checkpoint, decoded with its own "
            "decoding defaults and the decoding flags of its kind; repeat for more rows"
        ),
    )

    def validate(self) -> None:
        """Also at least one checkpoint to compare."""
        super().validate()
        if not self.against:
            raise GmlmError("--against: give at least one checkpoint to compare with --checkpoint")


@dataclasses.dataclass(frozen=True)
class CalibrationSettings(AnalysisSettings):
    """`gmlm analyze calibrate`: on validation data, a length setting chosen for a checkpoint
    (the setting and its values: the command's --setting and --values)."""

    split: str = field(default="valid", metadata=doc("split to decode"))
    batch_size: int = field(default=64, metadata=doc("sentences per batch", range=BATCH_SIZE))
    ar_beam: int = field(
        default=PAPER_BEAM,
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


@dataclasses.dataclass(frozen=True)
class Table1Settings:
    """`gmlm analyze table1`: the paper's Table 1 rows on the Multi30k test set of each
    direction (:mod:`gmlm.analysis.table1`). Everything that decides its numbers is here, so
    that the command line rendered from it (`to_argv`) makes the same table again."""

    directions: tuple[str, ...] = field(
        default=(),
        metadata=doc(
            "a translation direction, NAME=FOLDER: NAME its language pair, source-target "
            "(de-en), FOLDER the folder of its checkpoints ar and padir (as "
            "checkpoints/multi30k-de-en); repeat for each direction, a column group each",
            flag="--direction",
        ),
    )
    multi30k: Path | None = field(
        default=None,
        metadata=doc(
            "the Multi30k folder holding each direction's test set, test_2016_flickr.SRC and "
            "test_2016_flickr.TGT (.gz or plain; e.g. ../shared/data/multi30k)"
        ),
    )
    sentences: int = field(
        default=0,
        metadata=doc("only the first N test sentences (0: all)", range=FIRST_SENTENCES),
    )
    precision: Precision = field(
        default="fp32",
        metadata=doc(
            "fp32, bf16 (weights and activations) or int8 (dynamic quantisation of the Linear "
            "layers, CPU only)"
        ),
    )
    seed: int = field(
        default=0,
        metadata=doc(
            "seed of PaDIR's initial random tokens, each line its own as in `gmlm translate`",
            range=SEED,
        ),
    )

    def validate(self) -> None:
        """Also at least one direction, each named once, and the test set's folder given."""
        check_settings(self)
        if not self.directions:
            raise GmlmError(
                "give at least one --direction NAME=FOLDER, e.g. --direction "
                "de-en=checkpoints/multi30k-de-en"
            )
        names = [spec.partition("=")[0] for spec in self.directions]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise GmlmError(f"--direction {', '.join(twice)} given twice; give each once")
        if self.multi30k is None:
            raise GmlmError(
                "give --multi30k DIR, the Multi30k folder holding the test set "
                "(test_2016_flickr.de.gz and test_2016_flickr.en.gz for de-en and en-de)"
            )
