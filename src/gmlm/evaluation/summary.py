"""The numbers a results table shows for one system: BLEU, chrF, length ratio, stutter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gmlm.evaluation.bleu import corpus_scores
from gmlm.evaluation.stutter import stutter_report


def quality_row(
    hypotheses: Sequence[str], references: Sequence[str], tokenize: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """Rounded scores of line-aligned hypotheses against one reference each, and the
    signatures of BLEU and chrF ({"bleu": ..., "chrf": ...})."""
    scores = corpus_scores(hypotheses, references, tokenize)
    stutter = stutter_report(hypotheses, references, tokenize)
    row = {
        "bleu": round(scores["bleu"].score, 2),
        "chrf": round(scores["chrf"].score, 2),
        "length_ratio": round(scores["bleu"].length_ratio or 0.0, 3),
        "stutter_per_100_words": round(stutter.stutters_per_100_words, 3),
        "repeats_per_100_words": round(stutter.hypothesis_repeats_per_100_words, 3),
    }
    return row, {name: score.signature for name, score in scores.items()}
