"""The lines of a translation, in and out: raw text checked to be a list of str, each line
encoded within the model's max_source_len (a longer one refused, split or reported, as
``on_over_length`` says), and a warning when every decoded line came out empty.

A line over the limit is never cut silently: ``"error"`` names it and the limit; ``"split"``
translates each of its sentences on its own (the models learn from single sentences) and the
caller joins the translations with a space, a sentence that is still too long cut further at
clause punctuation, then between words, then between tokens, so that no text is left out;
``"report"`` leaves its output empty and names it in a warning.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from gmlm.data.cleaning import normalize
from gmlm.data.lengths import SHOWN, encode_inputs
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.options import DecodingOptions, changed_fields
from gmlm.errors import GmlmError

OverLengthPolicy = Literal["error", "split", "report"]

# Where --over-length split cuts a line, in order: after sentence-final punctuation (Latin
# punctuation before a space, so "3.5" stays whole; CJK punctuation anywhere), then after
# clause punctuation, then between words. Each keeps its punctuation.
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
CLAUSE_BREAK = re.compile(r"(?<=[,;:])\s+|(?<=[，；：、])\s*")
WORD_BREAK = re.compile(r"\s+")


def sentence_list(sentences: Any) -> list[str]:
    """`sentences` as a list, each checked to be a str (one string would be taken as a list
    of its characters, each translated on its own)."""
    if isinstance(sentences, (str, bytes)):
        raise GmlmError(
            f"sentences is a single {type(sentences).__name__}; pass a list of sentences, "
            'e.g. translate(["Ein Hund."]) for one'
        )
    if not isinstance(sentences, Iterable):
        raise GmlmError(f"sentences: expected a list of str, got {type(sentences).__name__}")
    items = list(sentences)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise GmlmError(f"sentences[{i}]: expected a str, got {type(item).__name__}")
        try:
            item.encode("utf-8")
        except UnicodeEncodeError as err:
            raise GmlmError(
                f"sentences[{i}]: holds {item[err.start]!r} at character {err.start}, a lone "
                "surrogate, which is not text (a string decoded with errors='surrogateescape' "
                "or split inside a surrogate pair); decode the input as UTF-8 or drop it"
            ) from None
    return items


def segments(
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    limit: int,
    policy: OverLengthPolicy,
    origin: str,
) -> tuple[list[list[int]], list[int]]:
    """The id sequences to decode and the sentence each belongs to (empty lines have none; a
    split line has several), each within `limit` tokens with EOS. A warning (policy "report")
    names the caller's caller, the frame that asked for the translation."""
    if policy not in ("error", "split", "report"):
        raise GmlmError(f"on_over_length={policy!r}: choose error, split or report")
    encoded = encode_inputs(
        tokenizer,
        sentences,
        limit,
        on_over_length="error" if policy == "error" else "report",
        origin=origin,
    )
    over = set(encoded.over_length)
    found: list[list[int]] = []
    owners: list[int] = []
    for i, ids in enumerate(encoded.ids):
        if i in over and policy == "report":
            continue
        parts = split_line(tokenizer, sentences[i], limit) if i in over else [ids]
        for part in parts:
            if part:
                found.append(part)
                owners.append(i)
    if over and policy == "report":
        lines = sorted(over)
        shown = ", ".join(f"line {i + 1} ({encoded.lengths[i]} tokens)" for i in lines[:SHOWN])
        more = f" and {len(lines) - SHOWN} more" if len(lines) > SHOWN else ""
        warnings.warn(
            f"{origin}: {len(over)} sentence(s) longer than the model's max_source_len="
            f"{limit} tokens (EOS included) left untranslated (empty output): {shown}{more}",
            stacklevel=3,
        )
    return found, owners


def split_line(tokenizer: Tokenizer, line: str, limit: int) -> list[list[int]]:
    """Ids of the pieces of `line` (raw text) that --over-length split translates, in order,
    each within `limit` tokens with EOS, together every token of the line: one piece per
    sentence, and a sentence still too long cut at clause punctuation, then between words
    (consecutive clauses or words packed while they fit), then between tokens (a word longer
    than the limit)."""
    text = normalize(line)
    pieces: list[list[int]] = []
    for start, end in _spans(text, SENTENCE_BREAK):
        pieces.extend(_fit(tokenizer, text[start:end], limit, (CLAUSE_BREAK, WORD_BREAK)))
    return pieces


def _fit(
    tokenizer: Tokenizer, text: str, limit: int, breaks: Sequence[re.Pattern[str]]
) -> list[list[int]]:
    """Ids of `text` in pieces of at most `limit` - 1 tokens: cut at the first of `breaks`
    (its parts packed greedily while they fit), each part too long cut by the next."""
    ids = tokenizer.encode(text)
    if len(ids) < limit:
        return [ids] if ids else []
    if not breaks:  # one "word" longer than the limit: consecutive runs of its tokens
        return [ids[i : i + limit - 1] for i in range(0, len(ids), limit - 1)]
    spans = _spans(text, breaks[0])
    counts = [len(tokenizer.encode(text[start:end])) for start, end in spans]
    pieces: list[list[int]] = []
    first, total = 0, 0
    for i, count in enumerate(counts):
        if i > first and total + count >= limit:
            part = text[spans[first][0] : spans[i - 1][1]]
            pieces.extend(_fit(tokenizer, part, limit, breaks[1:]))
            first, total = i, 0
        total += count
    pieces.extend(_fit(tokenizer, text[spans[first][0] : spans[-1][1]], limit, breaks[1:]))
    return pieces


def _spans(text: str, separator: re.Pattern[str]) -> list[tuple[int, int]]:
    """(start, end) of the non-blank parts of `text` between matches of `separator`."""
    spans, start = [], 0
    for match in separator.finditer(text):
        if match.start() > start:
            spans.append((start, match.start()))
        start = max(start, match.end())
    if start < len(text):
        spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


class EmptyTranslationsWarning(UserWarning):
    """Every line that was decoded got an empty translation (:func:`warn_if_all_empty`)."""


def warn_if_all_empty(
    translations: Sequence[str], decoded: set[int], options: DecodingOptions, origin: str
) -> None:
    """Warn (EmptyTranslationsWarning) when every line that was decoded (the indices
    `decoded`) got an empty translation: then the settings, not the input, are the likely
    cause, and a file of empty lines would otherwise pass for a result."""
    if not decoded or any(translations[i] for i in decoded):
        return
    changed = " ".join(f"{k}={v}" for k, v in changed_fields(options).items()) or "the defaults"
    warnings.warn(
        f"{origin}: every one of the {len(decoded)} non-empty line(s) was translated to an "
        f"empty line; the decoding settings ({changed}) likely leave no room for an output: "
        "check the length settings (length_shift, max_length, max_len_a, max_len_b) and the "
        "checkpoint",
        EmptyTranslationsWarning,
        stacklevel=3,
    )
