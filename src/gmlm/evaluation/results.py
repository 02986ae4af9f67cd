"""The evaluation's files: eval/scores.json of `gmlm reproduce` (every system on one split) and
the JSON of `gmlm evaluate --json` (one hypothesis file)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gmlm.evaluation.stutter import RepeatReport, StutterReport
from gmlm.evaluation.summary import Quality, Signatures
from gmlm.records import FLATTEN, OMIT_NONE, Record


@dataclass(frozen=True, kw_only=True)
class SystemScores(Record):
    """One system of eval/scores.json: `system` a file-name friendly key (ar-beam5,
    padir-T4-B5), `run` the run folder it decodes with, its decoding settings (AR: `beam`;
    PaDIR: `steps`, `length_beam`), its quality, and the seconds its decoding took (None when
    the hypotheses were already written)."""

    system: str
    label: str
    run: str
    beam: int | None = field(default=None, metadata=OMIT_NONE)
    steps: int | None = field(default=None, metadata=OMIT_NONE)
    length_beam: int | None = field(default=None, metadata=OMIT_NONE)
    quality: Quality = field(metadata=FLATTEN)
    decode_seconds: float | None


@dataclass(frozen=True, kw_only=True)
class EvaluationScores(Record):
    """eval/scores.json: every system scored on `sentences` pairs of `split`: all of it, or its
    first `sentences` of `split_sentences` (absent when the whole split was scored); the
    references' adjacent repeats and repeated n-grams as a control (the n-grams absent in files
    of gmlm before they were measured)."""

    split: str
    sentences: int
    split_sentences: int | None = field(default=None, metadata=OMIT_NONE)
    tokenize: str
    signatures: Signatures = field(metadata=FLATTEN)
    reference_repeats_per_100_words: float
    reference_ngram_repeats: RepeatReport | None = field(default=None, metadata=OMIT_NONE)
    precision: str
    systems: tuple[SystemScores, ...]

    def system(self, key: str) -> SystemScores | None:
        """The row of system `key` (e.g. "ar-beam5"), or None when it was not evaluated."""
        return next((r for r in self.systems if r.system == key), None)


@dataclass(frozen=True, kw_only=True)
class ScoreSummary(Record):
    """One metric of `gmlm evaluate --json`; `length_ratio` for BLEU only."""

    score: float
    signature: str
    length_ratio: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class Evaluation(Record):
    """`gmlm evaluate --json`: the files scored, BLEU, chrF and the stutter report."""

    hyp: str
    ref: str
    bleu: ScoreSummary
    chrf: ScoreSummary
    stutter: StutterReport
