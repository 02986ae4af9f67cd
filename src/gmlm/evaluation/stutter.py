"""The word-level stutter metric: words immediately repeated in the output.

A *repeat* is a pair of adjacent words that are equal (case-insensitive) after the sentence is
split into words with the BLEU tokenizer (13a, or `zh`); tokens without a letter or digit
(punctuation) are not words. Natural text repeats words too ("had had", "very very"), so a
hypothesis repeat counts as a *stutter* only in excess of the reference: for each word w,
stutters += max(0, repeats of w in the hypothesis - repeats of w in its reference).

Reported per system: stutters per 100 hypothesis words, the share of sentences with at least one
stutter, and, as a control, the raw repeat rate of the references themselves.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from sacrebleu.tokenizers.tokenizer_zh import TokenizerZh

from gmlm.errors import GmlmError
from gmlm.records import Record


def word_splitter(tokenize: str = "13a") -> Callable[[str], list[str]]:
    tokenizers = {"13a": Tokenizer13a, "zh": TokenizerZh}
    if tokenize not in tokenizers:
        raise GmlmError(f"unknown tokenizer '{tokenize}' for the stutter metric: use 13a or zh")
    tok = tokenizers[tokenize]()

    def split(sentence: str) -> list[str]:
        return [w.lower() for w in tok(sentence).split() if any(c.isalnum() for c in w)]

    return split


def adjacent_repeats(words: Sequence[str]) -> Counter[str]:
    """How often each word is immediately followed by itself."""
    return Counter(a for a, b in itertools.pairwise(words) if a == b)


@dataclass(frozen=True, kw_only=True)
class StutterReport(Record):
    sentences: int
    hypothesis_words: int
    stutters: int  # repeats in the hypotheses in excess of their references
    stutters_per_100_words: float
    sentences_with_stutter: float  # fraction of sentences with at least one stutter
    hypothesis_repeats_per_100_words: float  # raw repeats, no reference comparison
    reference_repeats_per_100_words: float  # control: natural repeats in the references


def stutter_report(
    hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a"
) -> StutterReport:
    if len(hypotheses) != len(references):
        raise GmlmError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: they must be "
            "line-aligned"
        )
    split = word_splitter(tokenize)
    hyp_words = ref_words = stutters = hyp_repeats = ref_repeats = with_stutter = 0
    for hyp, ref in zip(hypotheses, references, strict=True):
        hw, rw = split(hyp), split(ref)
        h_rep, r_rep = adjacent_repeats(hw), adjacent_repeats(rw)
        excess = sum(max(0, n - r_rep[w]) for w, n in h_rep.items())
        stutters += excess
        with_stutter += excess > 0
        hyp_repeats += sum(h_rep.values())
        ref_repeats += sum(r_rep.values())
        hyp_words += len(hw)
        ref_words += len(rw)
    n = len(hypotheses)
    return StutterReport(
        sentences=n,
        hypothesis_words=hyp_words,
        stutters=stutters,
        stutters_per_100_words=_per100(stutters, hyp_words),
        sentences_with_stutter=with_stutter / n if n else 0.0,
        hypothesis_repeats_per_100_words=_per100(hyp_repeats, hyp_words),
        reference_repeats_per_100_words=_per100(ref_repeats, ref_words),
    )


def _per100(count: int, words: int) -> float:
    return 100.0 * count / words if words else 0.0
