"""Corpus BLEU and chrF through the `sacrebleu` library, with their signatures.

Scores are computed on detokenized, cased text exactly as the `sacrebleu` command computes them
(13a tokenizer by default, `zh` for Chinese targets), so a number printed by gmlm can be checked
by running `sacrebleu REF -i HYP -m bleu chrf` on the same files.
"""

from __future__ import annotations

import re
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


# Chinese, under the codes a user may give it by (ISO 639-1, 639-2/B and 639-3).
CHINESE = {"zh", "chi", "zho", "cmn"}
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*")


def language_code(text: str) -> str:
    """The language of a code as a user gives it (`zh`, `ZH`, `zh-CN`, `zh_Hans`, `zho`):
    its language part, lower-case; anything else that is not a language code (BCP 47's form:
    two or three letters, then optional subtags) is a GmlmError."""
    if not LANGUAGE_CODE.fullmatch(text):
        raise GmlmError(
            f"{text!r} is not a language code: give one of two or three letters, as de, en "
            "or zh (a region or script after it, as zh-CN, is allowed)"
        )
    return language_part(text)


def language_part(code: str) -> str:
    """`zh-CN` -> `zh`: the part of a language code before any region or script, lower-case."""
    return re.split(r"[-_]", code, maxsplit=1)[0].lower()


def default_tokenizer(target_lang: str | None) -> str:
    """The tokenizer the paper's evaluation uses for a target language (a code in any case,
    with or without a region, as a dataset records it or :func:`language_code` checked it):
    zh for Chinese, else 13a (also where none is known)."""
    return "zh" if target_lang and language_part(target_lang) in CHINESE else "13a"


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
