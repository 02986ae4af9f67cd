"""Immediately repeated n-grams (words[i:i+n] == words[i+n:i+2n]): hand-computed cases, and
agreement with an independent regular-expression count on random word sequences."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from gmlm.evaluation.stutter import (
    NGRAM_ORDERS,
    RepeatReport,
    repeat_lines,
    repeat_report,
    repeated_ngrams,
    stutter_report,
    word_splitter,
)

# (sentence, repeats for n = 1, 2, 3, 4, has a repeated phrase of 2-4 words)
CASES = [
    ("A teenage girl plays the trumpet in a field in a field.", (0, 0, 1, 0), True),
    ("female guitarist playing a red guitar at night at night.", (0, 1, 0, 0), True),
    ("in a field , in a field", (0, 0, 1, 0), True),  # punctuation is not a word
    ("The the cat", (1, 0, 0, 0), False),  # case-insensitive; one word is not a phrase
    ("a a a a", (3, 1, 0, 0), True),  # "a a" twice: a 2-gram repeat too
    ("x y x y x y", (0, 3, 0, 0), True),  # at i = 0 ("x y"), 1 ("y x") and 2
    ("x y z x y z", (0, 0, 1, 0), True),
    ("one two three four one two three four", (0, 0, 0, 1), True),
    ("one two three four five one two three four five", (0, 0, 0, 0), False),  # n = 5
    ("x y x", (0, 0, 0, 0), False),  # not immediately repeated
    ("", (0, 0, 0, 0), False),
]


@pytest.mark.parametrize(("sentence", "repeats", "phrase"), CASES)
def test_hand_computed_cases(sentence: str, repeats: tuple[int, ...], phrase: bool) -> None:
    words = word_splitter()(sentence)
    assert tuple(repeated_ngrams(words, n) for n in NGRAM_ORDERS) == repeats
    report = repeat_report([sentence])
    assert tuple(g.repeats for g in report.ngrams) == repeats
    assert tuple(g.lines for g in report.ngrams) == tuple(int(r > 0) for r in repeats)
    assert report.phrase_lines == phrase


def test_report_rates() -> None:
    sentences = ["a girl in a field in a field", "a dog", "at night at night", "x x"]
    report = repeat_report(sentences)
    assert (report.lines, report.words) == (4, 16)
    assert [(g.n, g.lines, g.repeats) for g in report.ngrams] == [
        (1, 1, 1),
        (2, 1, 1),
        (3, 1, 1),
        (4, 0, 0),
    ]
    assert [g.line_share for g in report.ngrams] == [0.25, 0.25, 0.25, 0.0]
    assert [g.per_100_words for g in report.ngrams] == [6.25, 6.25, 6.25, 0.0]
    assert (report.phrase_lines, report.phrase_line_share) == (2, 0.5)
    assert repeat_report([]) == RepeatReport(
        lines=0,
        words=0,
        ngrams=tuple(repeat_report([""]).ngrams),
        phrase_lines=0,
        phrase_line_share=0.0,
    )
    thirds = repeat_report(["a b a b", "c", "d"]).rounded()
    assert thirds.phrase_line_share == 0.333 and thirds.ngrams[1].line_share == 0.333


def test_stutter_report_carries_both_sides() -> None:
    report = stutter_report(["in a field in a field", "a dog"], ["in a field", "a a dog"])
    assert report.hypothesis_ngram_repeats == repeat_report(["in a field in a field", "a dog"])
    assert report.reference_ngram_repeats == repeat_report(["in a field", "a a dog"])
    assert report.reference_ngram_repeats.ngrams[0].repeats == 1
    # n = 1 is the word-level metric's adjacent repeat
    assert report.hypothesis_repeats_per_100_words == 0.0
    assert report.reference_repeats_per_100_words == pytest.approx(
        report.reference_ngram_repeats.ngrams[0].per_100_words
    )


def brute_force(words: list[str], n: int) -> int:
    """Overlapping matches of "an n-symbol string followed by itself", each word one symbol."""
    symbols = {w: chr(0x4E00 + i) for i, w in enumerate(dict.fromkeys(words))}
    text = "".join(symbols[w] for w in words)
    return len(re.findall(rf"(?=(.{{{n}}})\1)", text, flags=re.DOTALL))


def test_agrees_with_brute_force_on_random_sequences() -> None:
    rng = random.Random(36)
    sentences = []
    for _ in range(400):
        vocab = ["a", "b", "c", "d"][: rng.randint(1, 4)]
        sentences.append(" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 24))))
    lines = [s.split() for s in sentences]
    for words in lines:
        for n in (*NGRAM_ORDERS, 5, 7):
            assert repeated_ngrams(words, n) == brute_force(words, n), (words, n)
    report = repeat_report(sentences)
    for g in report.ngrams:
        counts = [brute_force(words, g.n) for words in lines]
        assert g.repeats == sum(counts) and g.lines == sum(c > 0 for c in counts)
        assert g.per_100_words == pytest.approx(100 * sum(counts) / sum(map(len, lines)))
    phrases = sum(any(brute_force(words, n) for n in (2, 3, 4)) for words in lines)
    assert report.phrase_lines == phrases and 0 < phrases < len(lines)


def test_repeat_lines_set_hypotheses_beside_references() -> None:
    report = stutter_report(["in a field in a field"], ["in a field"])
    none = "0.00% of lines, 0.000 per 100 words"
    assert repeat_lines(report) == [
        "repeated n-grams (words[i:i+n] == words[i+n:i+2n]): hypothesis | reference (control)",
        f"  n=1: {none} | {none}",
        f"  n=2: {none} | {none}",
        f"  n=3: 100.00% of lines, 16.667 per 100 words | {none}",  # 1 repeat in 6 words
        f"  n=4: {none} | {none}",
        "  lines with a repeated phrase (2-4 words): 1 of 1 lines (100.00%) | 0 of 1 lines (0.00%)",
    ]
    # a report written before the n-grams were measured lacks either side: no lines
    assert repeat_lines(dataclasses.replace(report, reference_ngram_repeats=None)) == []
    assert repeat_lines(dataclasses.replace(report, hypothesis_ngram_repeats=None)) == []


def test_no_words_give_zero_rates() -> None:
    report = stutter_report([""], [""])
    assert (report.sentences, report.hypothesis_words) == (1, 0)
    assert report.stutters_per_100_words == report.hypothesis_repeats_per_100_words == 0.0
    assert report.reference_repeats_per_100_words == report.sentences_with_stutter == 0.0
