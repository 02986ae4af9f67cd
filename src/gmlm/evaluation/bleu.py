"""Corpus BLEU and chrF through the `sacrebleu` library, with their signatures.

Scores are computed on detokenized, cased text exactly as the `sacrebleu` command computes them
(13a tokenizer by default, `zh` for Chinese targets), so a number printed by gmlm can be checked
by running `sacrebleu REF -i HYP -m bleu chrf` on the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

from gmlm.errors import GmlmError


@dataclass(frozen=True)
class Score:
    name: str
    score: float
    signature: str
    text: str  # sacrebleu's own formatted line, e.g. "BLEU = 34.12 65.0/40.1/..."
    # BLEU only: hypothesis / reference length in BLEU tokens (below 1: brevity penalty).
    length_ratio: float | None = None


def default_tokenizer(target_lang: str | None) -> str:
    """The tokenizer the paper's evaluation uses for a target language."""
    return "zh" if target_lang == "zh" else "13a"


def corpus_scores(
    hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a"
) -> dict[str, Score]:
    """BLEU and chrF of line-aligned hypotheses against one reference each."""
    if len(hypotheses) != len(references):
        raise GmlmError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: they must be "
            "line-aligned"
        )
    if not hypotheses:
        raise GmlmError("nothing to score: the hypothesis file is empty")
    if not any(ref.strip() for ref in references):
        raise GmlmError(
            f"nothing to score: all {len(references)} reference line(s) are empty; give the "
            "references of the hypotheses, one per line"
        )
    bleu = BLEU(tokenize=tokenize)
    chrf = CHRF()
    refs = [list(references)]
    out = {}
    for name, metric in (("bleu", bleu), ("chrf", chrf)):
        result = metric.corpus_score(list(hypotheses), refs)
        ratio = getattr(result, "ratio", None)  # BLEUScore has one, CHRFScore not
        out[name] = Score(
            name,
            float(result.score),
            str(metric.get_signature()),
            str(result),
            None if ratio is None else float(ratio),
        )
    return out
