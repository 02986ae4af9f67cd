"""The results of the analyses, as `gmlm analyze ... --output` and the analysis stages of
`gmlm reproduce` hold them: :class:`LengthResult`, :class:`AttentionResult`,
:class:`AblationResult`, :class:`ComparisonResult`, :class:`CalibrationResult` and
:class:`Table1Result`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from gmlm.errors import GmlmError
from gmlm.evaluation.summary import Quality, Signatures
from gmlm.records import FLATTEN, OMIT_NONE, Record, fields_from_json

# ------------------------------------------------------------------------------ length


@dataclass(frozen=True, kw_only=True)
class LengthSentences(Record):
    """Pairs in the split (or its first `sentences`), analysed, and skipped by reason."""

    in_split: int
    analysed: int
    skipped: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class Predictor(Record):
    """The length predictor against the reference lengths (pieces + EOS): shares of pairs whose
    top-1 length is exact / within 1 / within 2, its mean absolute and signed error, the share
    of references among the top `length_beam` lengths (JSON key `reference_in_top_B`, B =
    `length_beam`), the reference's mean rank and the mean reference length."""

    top1_exact: float
    top1_within_1: float
    top1_within_2: float
    top1_mean_abs_error: float
    top1_mean_signed_error: float
    length_beam: int
    reference_in_top: float
    reference_mean_rank: float
    mean_reference_length: float

    def to_json(self) -> dict[str, Any]:
        out = {}
        for key, value in super().to_json().items():
            if key != "length_beam":
                out[_IN_TOP.format(self.length_beam) if key == "reference_in_top" else key] = value
        return out

    @classmethod
    def from_json(cls, data: Any, origin: str = "JSON", path: str = "") -> Predictor:
        if not isinstance(data, dict):
            return fields_from_json(cls, data, origin, path)  # the error for a non-object
        named = [key for key in data if re.fullmatch(_IN_TOP.format(r"\d+"), key)]
        if len(named) != 1:
            where = f"{path}." if path else ""
            raise GmlmError(
                f"{origin}: key '{where}{_IN_TOP.format('B')}' must appear exactly once, found "
                f"{named or 'none'}; rerun the analysis that writes it"
            )
        beam = int(named[0].rsplit("_", 1)[1])
        renamed: dict[str, Any] = {}
        for key, value in data.items():
            if key == named[0]:
                renamed["length_beam"] = beam
                renamed["reference_in_top"] = value
            else:
                renamed[key] = value
        return fields_from_json(cls, renamed, origin, path)


_IN_TOP = "reference_in_top_{}"


@dataclass(frozen=True, kw_only=True)
class LengthRow(Record):
    """One decoding of every pair: `oracle` decodes the reference length; with several lengths
    (`length_beam` > 1), `chosen_is_reference_length` is the share of pairs whose selected
    candidate has the reference length."""

    decoding: str
    length_beam: int
    length_weight: float
    oracle: bool
    quality: Quality = field(metadata=FLATTEN)
    chosen_is_reference_length: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class LengthSettings(Record):
    """`decoding`: the base decoder options (each configuration then sets its length_beam,
    length_weight and, for the oracle, no length offsets) as `dataclasses.asdict` gives them,
    less those that cannot change the rows; a dict for the reason `AttentionSettings.decoding`
    is one. Files written before the options were declared in `gmlm.decoding.options` lack it
    (None)."""

    steps: int
    length_beam: int
    length_weights: tuple[float, ...]
    decoding: dict[str, Any] | None = field(default=None, metadata=OMIT_NONE)
    batch_size: int
    seed: int
    bf16: bool
    tokenize: str
    device: str
    threads: int
    torch: str
    gmlm: str


@dataclass(frozen=True, kw_only=True)
class LengthResult(Record):
    """`gmlm analyze length`: see :mod:`gmlm.analysis.length`."""

    analysis: Literal["length"] = "length"
    checkpoint: str
    data: str
    split: str
    sentences: LengthSentences
    predictor: Predictor
    decoding: tuple[LengthRow, ...]
    settings: LengthSettings
    seconds: float


# ---------------------------------------------------------------------------- ablation


@dataclass(frozen=True, kw_only=True)
class PairedRow(Record):
    """One decoding of a split, compared with the first row's: `bleu_delta`, its BLEU minus
    the first row's; `p_value`, sacrebleu's paired bootstrap against the first row (None for
    the first row itself and for a row with `same_output`: translations equal to the first
    row's, line for line); `seconds`, wall time of its translation of the split."""

    quality: Quality = field(metadata=FLATTEN)
    bleu_delta: float
    p_value: float | None
    same_output: bool
    seconds: float


@dataclass(frozen=True, kw_only=True)
class AblationRow(PairedRow):
    """A decoding of the ablation: `variant` is "default" (the first row) or the variant's
    settings as given, `settings` the fields it changes (empty for the default)."""

    variant: str
    settings: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class PairedScoring(Record):
    """How the rows of a split's decodings compared by the paired bootstrap were decoded and
    scored (the ablation's and the comparison's); `bootstrap`: sacrebleu's signature of the
    paired bootstrap, its seed included."""

    batch_size: int
    seed: int
    bf16: bool
    tokenize: str
    bleu_signature: str
    bootstrap: str
    device: str
    threads: int
    torch: str
    gmlm: str


@dataclass(frozen=True, kw_only=True)
class AblationSettings(PairedScoring):
    """`decoding`: the default row's options as `dataclasses.asdict` gives them, less those
    that cannot change a translation (a dict for the reason `AttentionSettings.decoding` is
    one)."""

    decoding: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class AblationResult(Record):
    """`gmlm analyze ablation`: see :mod:`gmlm.analysis.ablation`. `sentences`: the pairs
    scored (the first `sentences` of the split, or all `in_split`)."""

    analysis: Literal["ablation"] = "ablation"
    checkpoint: str
    data: str
    split: str
    in_split: int
    sentences: int
    rows: tuple[AblationRow, ...]
    settings: AblationSettings
    seconds: float


# -------------------------------------------------------------------------- comparison


@dataclass(frozen=True, kw_only=True)
class ComparisonRow(PairedRow):
    """One checkpoint's decoding of the split, with its own decoding defaults (decoding.json)
    changed by the flags of its kind (`decoding`: the options it decoded with)."""

    checkpoint: str
    kind: str
    decoding: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class ComparisonResult(Record):
    """`gmlm analyze compare`: see :mod:`gmlm.analysis.comparison`."""

    analysis: Literal["compare"] = "compare"
    data: str
    split: str
    in_split: int
    sentences: int
    rows: tuple[ComparisonRow, ...]
    settings: PairedScoring
    seconds: float


# --------------------------------------------------------------------------- attention

GROUPS = ("stutter", "non_stutter")
"""The groups of adjacent output pairs the attention tables compare: the keys of
`AttentionResult.pairs` and of each table."""


@dataclass(frozen=True, kw_only=True)
class AttentionSentences(Record):
    in_split: int
    decoded: int
    skipped_empty: int
    skipped_over_length: int


@dataclass(frozen=True, kw_only=True)
class AttentionModel(Record):
    """The checkpoint's heads and decoder layers, and the layer analysed (the last)."""

    heads: int
    decoder_layers: int
    layer: int


@dataclass(frozen=True, kw_only=True)
class AttentionSettings(Record):
    """`decoding`: the decoder's options as `dataclasses.asdict` gives them, less those that
    cannot change the raw hypotheses analysed. It stays a dict because its keys are the fields
    of `RefinementOptions`, which the decoding module owns and extends; the analysis only shows
    `steps`, `length_beam` and `stutter_remask` of it."""

    decoding: dict[str, Any]
    batch_size: int
    seed: int
    bf16: bool
    device: str
    threads: int
    torch: str
    gmlm: str


@dataclass(frozen=True, kw_only=True)
class MeanStd(Record):
    """Mean and population std over the pairs of a group; None for both when it has none."""

    mean: float | None
    std: float | None


@dataclass(frozen=True, kw_only=True)
class HeadSummary(Record):
    """A metric aggregated over heads per pair (min / avg / max), then over pairs."""

    min: MeanStd
    avg: MeanStd
    max: MeanStd

    def aggregate(self, name: str) -> MeanStd:
        """The aggregate `name` ("min", "avg" or "max": `metrics.HEAD_AGGREGATES`)."""
        return {"min": self.min, "avg": self.avg, "max": self.max}[name]


@dataclass(frozen=True, kw_only=True)
class GroupSummary(Record):
    """One group of pairs (stutter or not) in one table: its pair count, the distance metrics
    of the table (self-attention: `next`, `prev`, `tv`, `cosine`; cross-attention: `tv`,
    `cosine`) and the top-k probabilities (k in `metrics.TOP_K`; None without pairs)."""

    pairs: int
    next: HeadSummary | None = field(default=None, metadata=OMIT_NONE)
    prev: HeadSummary | None = field(default=None, metadata=OMIT_NONE)
    tv: HeadSummary
    cosine: HeadSummary
    p_top1: float | None
    p_top2: float | None

    def distance(self, name: str) -> HeadSummary:
        """The metric `name` (a key of `attention.DISTANCES[table]`)."""
        found = {"next": self.next, "prev": self.prev, "tv": self.tv, "cosine": self.cosine}
        summary = found[name]
        if summary is None:
            raise KeyError(f"this table has no metric {name!r}")
        return summary

    def p_top(self, k: int) -> float | None:
        return {1: self.p_top1, 2: self.p_top2}[k]


@dataclass(frozen=True, kw_only=True)
class AttentionResult(Record):
    """`gmlm analyze attention`: see :mod:`gmlm.analysis.attention`. `pairs` and both tables
    are keyed by group (`GROUPS`). `paper` (the paper's cells where the design document quotes
    them, nested as the tables are, plus their source and finding) and `definitions` (metric
    name -> definition) are constants of the analysis, copied into every result so that a
    file explains itself; open-ended by nature."""

    analysis: Literal["attention"] = "attention"
    checkpoint: str
    data: str
    split: str
    sentences: AttentionSentences
    output_tokens: int
    sentences_with_stutter: int
    pairs: dict[str, int]
    model: AttentionModel
    settings: AttentionSettings
    self_attention: dict[str, GroupSummary]
    cross_attention: dict[str, GroupSummary]
    paper: dict[str, Any]
    definitions: dict[str, str]
    seconds: float

    def table(self, name: str) -> dict[str, GroupSummary]:
        """Table `name` ("self_attention" or "cross_attention": `attention.TABLES`)."""
        return {"self_attention": self.self_attention, "cross_attention": self.cross_attention}[
            name
        ]


# ------------------------------------------------------------------------- calibration


@dataclass(frozen=True, kw_only=True)
class CalibrationRow(Record):
    """The split decoded with one value of the setting."""

    value: float
    bleu: float
    length_ratio: float
    seconds: float


@dataclass(frozen=True, kw_only=True)
class Calibration(Record):
    """One checkpoint's grid: the setting, its class default, the value the checkpoint's
    decoding.json held before (`previous`; None: none, the class default was in use), the
    value chosen, every row, and what the calibration did to decoding.json (`decision`, in
    words; None in records of a gmlm before it said)."""

    checkpoint: str
    split: str
    sentences: int
    setting: str
    decoding: dict[str, Any]  # the other settings given (open-ended: option name -> value)
    default: float
    chosen: float
    min_gain: float
    bleu_signature: str
    rows: tuple[CalibrationRow, ...]
    previous: float | None = field(default=None, metadata=OMIT_NONE)
    decision: str | None = field(default=None, metadata=OMIT_NONE)

    @property
    def baseline(self) -> float:
        """What the checkpoint decoded with before: the value to beat."""
        return self.default if self.previous is None else self.previous

    def label(self, value: float) -> str:
        """A grid value as the tables show it: "1 **chosen**", "0 (default)"."""
        return (
            f"{value:g}"
            + (" (default)" if value == self.default else "")
            + (" (recorded before)" if value == self.previous else "")
            + (" **chosen**" if value == self.chosen else "")
        )

    def summary(self) -> str:
        """One line: the rule and the scores, as the checkpoint's decoding.json records it."""
        scores = ", ".join(f"{r.bleu:.2f} at {r.value:g}" for r in self.rows)
        given = " ".join(f"{k}={v}" for k, v in self.decoding.items())
        rival = (
            f"the default ({self.default:g})"
            if self.previous is None
            else f"the value recorded before ({self.previous:g})"
        )
        return (
            f"{self.setting} chosen on the {self.split} split ({self.sentences} pairs"
            f"{', ' + given if given else ''}): BLEU {scores}; the best value is kept only "
            f"if it beats {rival} by more than {self.min_gain:g}"
        )


@dataclass(frozen=True, kw_only=True)
class CalibrationResult(Record):
    """`gmlm reproduce`'s calibrate stage: each calibrated run's grid, by run name."""

    models: dict[str, Calibration]


# ----------------------------------------------------------------------------- table 1


@dataclass(frozen=True, kw_only=True)
class Table1System(Record):
    """One row of Table 1 in one direction: the system's key (ar-beam5, padir-T4-B5,
    padir-T10-B5) and label, the checkpoint it ran, every decoding setting it ran with
    (`decoding`: its options as `dataclasses.asdict` gives them, less those that cannot change
    a translation; the checkpoint's decoding.json and the row's own settings included), the
    `gmlm translate` flags that give them, its scores, the wall seconds of its translation,
    and the paper's BLEU in this direction (None where the paper's Table 1 has none)."""

    system: str
    label: str
    checkpoint: str
    decoding: dict[str, Any]
    translate_flags: str
    quality: Quality = field(metadata=FLATTEN)
    seconds: float
    paper_bleu: float | None


@dataclass(frozen=True, kw_only=True)
class Table1Direction(Record):
    """One direction's column group: its name (source-target), the folder of its
    checkpoints, how the checkpoints' languages were checked (`languages`: by kind, a
    sentence each), the test files, the pairs scored (the first `sentences` of
    `test_sentences`), the BLEU tokenizer and signatures, the paper's corpus of this direction
    (None where the paper has no column for it), and its rows."""

    direction: str
    folder: str
    languages: dict[str, str]
    source_file: str
    reference_file: str
    sentences: int
    test_sentences: int
    tokenize: str
    signatures: Signatures = field(metadata=FLATTEN)
    paper_corpus: str | None
    systems: tuple[Table1System, ...]


@dataclass(frozen=True, kw_only=True)
class Table1Result(Record):
    """`gmlm analyze table1` (:mod:`gmlm.analysis.table1`): `command` makes this table again
    (add --output and --markdown to write it); the precision and seed of every row, where it
    ran, the wall seconds of the whole run, and a column group per direction."""

    analysis: Literal["table1"] = "table1"
    command: str
    precision: str
    seed: int
    device: str
    threads: int
    torch: str
    gmlm: str
    seconds: float
    directions: tuple[Table1Direction, ...]
