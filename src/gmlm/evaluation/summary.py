"""The numbers a results table shows for one system: BLEU, chrF, length ratio, stutter,
repeated n-grams."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gmlm.evaluation.bleu import corpus_scores
from gmlm.evaluation.stutter import RepeatReport, repeat_report, stutter_report
from gmlm.records import OMIT_NONE, Record, json_key


@dataclass(frozen=True, kw_only=True)
class Quality(Record):
    """Rounded scores of one system's hypotheses: BLEU and chrF (sacrebleu), the BLEU length
    ratio (hypothesis / reference length in BLEU tokens), stutters in excess of the references
    and all adjacent repeats, per 100 hypothesis words, and the immediately repeated n-grams
    (n = 1..4, rounded; None in files of gmlm before they were measured). Rows of results tables
    carry these keys among their own (a flattened field)."""

    bleu: float
    chrf: float
    length_ratio: float
    stutter_per_100_words: float
    repeats_per_100_words: float
    ngram_repeats: RepeatReport | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True, kw_only=True)
class Signatures(Record):
    """The sacrebleu signatures of BLEU and chrF (keys `bleu_signature`, `chrf_signature`)."""

    bleu: str = field(metadata=json_key("bleu_signature"))
    chrf: str = field(metadata=json_key("chrf_signature"))


def quality_row(
    hypotheses: Sequence[str], references: Sequence[str], tokenize: str
) -> tuple[Quality, Signatures]:
    """Rounded scores of line-aligned hypotheses against one reference each, and the
    signatures of BLEU and chrF."""
    scores = corpus_scores(hypotheses, references, tokenize)
    stutter = stutter_report(hypotheses, references, tokenize)
    quality = Quality(
        bleu=round(scores["bleu"].score, 2),
        chrf=round(scores["chrf"].score, 2),
        length_ratio=round(scores["bleu"].length_ratio or 0.0, 3),
        stutter_per_100_words=round(stutter.stutters_per_100_words, 3),
        repeats_per_100_words=round(stutter.hypothesis_repeats_per_100_words, 3),
        ngram_repeats=repeat_report(hypotheses, tokenize).rounded(),
    )
    return quality, Signatures(bleu=scores["bleu"].signature, chrf=scores["chrf"].signature)
