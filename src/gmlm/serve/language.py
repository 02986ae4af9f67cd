"""The input language check in the service (:mod:`gmlm.translation.language_check`): a request's
flagged lines come back as per-line warnings in its response (:class:`LineWarning`), are
counted by model and reason (``gmlm_flagged_lines_total``), and with ``"strict": true`` make
the request a 422 that names them. A model whose checkpoint (or CTranslate2 export) records no
languages is not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from gmlm.serve.metrics import Metrics
from gmlm.translation.language_check import (
    LanguageCheckError,
    flag_lines,
    identifier,
    language_name,
    listing,
    source_of,
)


class LineWarning(BaseModel):
    """A line of the request that the input language check flagged (it is translated all the
    same, unless the request is strict)."""

    index: int = Field(description="the line's index in `text`, from 0")
    reason: Literal["language", "no_letters", "control"] = Field(
        description="language: confidently another language than the model's source language "
        "(lines of 3 words or more); no_letters: no letters at all (punctuation, digits, "
        "symbols or control characters only); control: letters with a control character such "
        "as NUL (text in another encoding, binary data, a terminal colour code)"
    )
    message: str = Field(description="why, in words")
    language: str | None = Field(default=None, description="the language found (reason language)")
    confidence: float | None = Field(
        default=None, description="the identifier's probability of that language"
    )


def preload(languages: str | None) -> None:
    """Load the identifier a model of `languages` ("de-en") needs, so that the first request
    does not wait for it (about 0.5 s); nothing for None."""
    source = source_of(languages)
    if source is not None:
        identifier(source)


def check_text(
    texts: Sequence[str], languages: str | None, model: str, strict: bool, metrics: Metrics
) -> list[LineWarning]:
    """The warnings of a request's lines for the model `model` of `languages` ("de-en"; None:
    not checked), each counted; with `strict`, flagged lines are a LanguageCheckError (a
    GmlmError: 422) that names them."""
    source = source_of(languages)
    if source is None:
        return []
    flags = flag_lines(texts, source)
    for flag in flags:
        metrics.flagged_lines.labels(model, flag.reason).inc()
    if flags and strict:
        raise LanguageCheckError(
            f"text: {len(flags)} of {len(texts)} lines may not be {language_name(source)} text, "
            f"model {model!r}'s source language; nothing was translated (strict):\n"
            + listing(flags, lambda i: f"text[{i}]")
            + '\nfix or drop these lines, or leave out "strict" to translate them with '
            "warnings",
            flags,
        )
    return [LineWarning(**flag.to_json()) for flag in flags]
