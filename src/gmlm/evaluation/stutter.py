"""The word-level stutter metric: words immediately repeated in the output.

A *repeat* is a pair of adjacent words that are equal (case-insensitive) after the sentence is
split into words with the BLEU tokenizer (13a, or `zh`); tokens without a letter or digit
(punctuation) are not words. Natural text repeats words too ("had had", "very very"), so a
hypothesis repeat counts as a *stutter* only in excess of the reference: for each word w,
stutters += max(0, repeats of w in the hypothesis - repeats of w in its reference).

Reported per system: stutters per 100 hypothesis words, the share of sentences with at least one
stutter, and, as a control, the raw repeat rate of the references themselves.

A non-autoregressive decoder also repeats whole phrases ("in a field in a field"), which the
word-level metric does not see. An *immediately repeated n-gram* of the same words is an index
i with words[i:i+n] == words[i+n:i+2n]; for n = 1..4 (NGRAM_ORDERS) the hypotheses and, as a
control, the references get the lines with at least one and the repeats (such i) per 100
words, and the lines with a repeated phrase: an immediately repeated n-gram for some n in
2..4 (PHRASE_ORDERS). n = 1 is the adjacent repeat above.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from sacrebleu.tokenizers.tokenizer_zh import TokenizerZh

from gmlm.errors import GmlmError
from gmlm.records import OMIT_NONE, Record

#: The n of the repeated n-gram rates.
NGRAM_ORDERS = (1, 2, 3, 4)
#: The n of a repeated phrase: an n-gram of 2 to 4 words immediately repeated.
PHRASE_ORDERS = (2, 3, 4)


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


def repeated_ngrams(words: Sequence[str], n: int) -> int:
    """How many i have words[i:i+n] == words[i+n:i+2n]: n-grams immediately repeated."""
    return sum(words[i : i + n] == words[i + n : i + 2 * n] for i in range(len(words) - 2 * n + 1))


@dataclass(frozen=True, kw_only=True)
class NgramRepeats(Record):
    """The immediately repeated n-grams of one n in a set of lines."""

    n: int
    lines: int  # lines with at least one
    line_share: float  # lines / all lines
    repeats: int  # how many i of all lines have words[i:i+n] == words[i+n:i+2n]
    per_100_words: float


@dataclass(frozen=True, kw_only=True)
class RepeatReport(Record):
    """Immediately repeated n-grams in a set of lines (hypotheses or references), n = 1..4, and
    the lines with a repeated phrase (some n of 2..4)."""

    lines: int
    words: int
    ngrams: tuple[NgramRepeats, ...]  # n = NGRAM_ORDERS, in order
    phrase_lines: int
    phrase_line_share: float

    def rounded(self, digits: int = 3) -> RepeatReport:
        """This report with its shares and rates rounded (the precision of results tables)."""
        return dataclasses.replace(
            self,
            ngrams=tuple(
                dataclasses.replace(
                    g,
                    line_share=round(g.line_share, digits),
                    per_100_words=round(g.per_100_words, digits),
                )
                for g in self.ngrams
            ),
            phrase_line_share=round(self.phrase_line_share, digits),
        )


def repeat_report(sentences: Sequence[str], tokenize: str = "13a") -> RepeatReport:
    """The immediately repeated n-grams of `sentences`, split into words as stutter is."""
    lines = list(map(word_splitter(tokenize), sentences))
    with_repeat = dict.fromkeys(NGRAM_ORDERS, 0)
    repeats = dict.fromkeys(NGRAM_ORDERS, 0)
    phrase_lines = 0
    for words in lines:
        found = {n: repeated_ngrams(words, n) for n in NGRAM_ORDERS}
        for n, count in found.items():
            repeats[n] += count
            with_repeat[n] += count > 0
        phrase_lines += any(found[n] for n in PHRASE_ORDERS)
    total = sum(map(len, lines))
    return RepeatReport(
        lines=len(lines),
        words=total,
        ngrams=tuple(
            NgramRepeats(
                n=n,
                lines=with_repeat[n],
                line_share=_share(with_repeat[n], len(lines)),
                repeats=repeats[n],
                per_100_words=_per100(repeats[n], total),
            )
            for n in NGRAM_ORDERS
        ),
        phrase_lines=phrase_lines,
        phrase_line_share=_share(phrase_lines, len(lines)),
    )


@dataclass(frozen=True, kw_only=True)
class StutterReport(Record):
    sentences: int
    hypothesis_words: int
    stutters: int  # repeats in the hypotheses in excess of their references
    stutters_per_100_words: float
    sentences_with_stutter: float  # fraction of sentences with at least one stutter
    hypothesis_repeats_per_100_words: float  # raw repeats, no reference comparison
    reference_repeats_per_100_words: float  # control: natural repeats in the references
    # Immediately repeated n-grams (None in files of gmlm before they were measured).
    hypothesis_ngram_repeats: RepeatReport | None = field(default=None, metadata=OMIT_NONE)
    reference_ngram_repeats: RepeatReport | None = field(default=None, metadata=OMIT_NONE)


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
        sentences_with_stutter=_share(with_stutter, n),
        hypothesis_repeats_per_100_words=_per100(hyp_repeats, hyp_words),
        reference_repeats_per_100_words=_per100(ref_repeats, ref_words),
        hypothesis_ngram_repeats=repeat_report(hypotheses, tokenize),
        reference_ngram_repeats=repeat_report(references, tokenize),
    )


def repeat_lines(report: StutterReport) -> list[str]:
    """The repeated n-grams of a stutter report's hypotheses beside its references', as text
    lines (none for a report of gmlm before they were measured)."""
    hyp, ref = report.hypothesis_ngram_repeats, report.reference_ngram_repeats
    if hyp is None or ref is None:
        return []

    def rates(g: NgramRepeats) -> str:
        return f"{100 * g.line_share:.2f}% of lines, {g.per_100_words:.3f} per 100 words"

    def phrases(r: RepeatReport) -> str:
        return f"{r.phrase_lines:,} of {r.lines:,} lines ({100 * r.phrase_line_share:.2f}%)"

    return [
        "repeated n-grams (words[i:i+n] == words[i+n:i+2n]): hypothesis | reference (control)",
        *(
            f"  n={h.n}: {rates(h)} | {rates(r)}"
            for h, r in zip(hyp.ngrams, ref.ngrams, strict=True)
        ),
        f"  lines with a repeated phrase (2-4 words): {phrases(hyp)} | {phrases(ref)}",
    ]


def _per100(count: int, words: int) -> float:
    return 100.0 * count / words if words else 0.0


def _share(count: int, lines: int) -> float:
    return count / lines if lines else 0.0
