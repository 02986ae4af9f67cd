"""Whether input lines are text a model can translate: in its source language, with letters.

A model given another language than the one it learned from, or no text at all, does not fail:
the shipped German-English checkpoints/multi30k-de-en/ar1 turns "Two young men are playing
football in a park." into "A fisherman in the air." and two NUL bytes into "A view of an
outdoor train.". So every line is checked before it is translated, and a line is flagged
(never altered) where

* it has no letters (``no_letters``): only punctuation, digits, symbols, control characters
  such as NUL bytes; a blank line is not flagged (it gives an empty output untranslated);
* it has letters and a control character (``control``; tab and the other whitespace
  controls aside, which cleaning turns into spaces): no text holds one, and those that come
  are signs of text read in the wrong encoding (UTF-16 of ASCII letters, read as UTF-8, is a
  NUL after every letter) or of terminal colour codes pasted with it. Files never get here
  with a NUL (:func:`gmlm.data.textfiles.decode_utf8` refuses it); the Python API and the
  service's JSON can;
* its language is confidently another one (``language``): py3langid's identifier, restricted
  to :data:`CANDIDATES` (the source language added), gives the source language a probability
  of at most :data:`SOURCE_AT_MOST` (the message names the most likely language). A bound on
  the source language's probability rather than a floor on another's: close languages share
  the rest (a Russian line gives Russian 0.87 and Ukrainian 0.13), and it is the source
  language's absence that matters. Only lines of at least :data:`MIN_WORDS` words are judged
  so: on a line of one or two words the identifier is a guess ("A man." comes out Hungarian,
  "dog runs fast" Danish), and a short line in the right language must not be refused.

The thresholds were chosen with py3langid 0.4.0 on Multi30k (the first 10,000 training lines
of each side, the 1,014 validation and 1,000 test_2016_flickr lines): no German or English line
is flagged against its own language, nor the first 3, 4 or 5 words of the 10,000 training lines
(a bound of 0.1, with a most likely language of 0.5 or more, flagged 7 English 3-word starts
of 5,000), while 99.4% of the English training lines are flagged against German, 99.8% of the
German ones against English, and 1,011 and 1,012 of the 1,014 validation lines.

The check needs the source language: a checkpoint whose languages are not known (see
:mod:`gmlm.checkpoint.languages`) is not checked. It runs in Python on the calling thread:
about 60 microseconds per line on 2 shared cores of an Intel Xeon (61 on 2,000 lines of the
shipped examples, half of them flagged; 57 on the 1,000 German test_2016_flickr lines against
German, none flagged), measured with

    .venv/bin/python tools/language_check_cost.py [--input FILE --source de]

against tens of milliseconds to translate a line on a CPU. The identifier (py3langid, imported
on first use, not with ``gmlm``) loads in about 0.5 s and holds about 80 MB, once per process.

Who uses it: :meth:`gmlm.translation.translator.Translator.translate` (``check_language=``
"warn", "strict" or "off"), hence `gmlm translate` (a warning on stderr, or ``--strict``), and
`gmlm serve` (per-line warnings in the response, or ``"strict": true``; :mod:`gmlm.serve.language`).
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gmlm.data.cleaning import normalize
from gmlm.errors import GmlmError

LanguageCheck = Literal["warn", "strict", "off"]
CHECKS: tuple[LanguageCheck, ...] = ("warn", "strict", "off")
Reason = Literal["language", "no_letters", "control"]
REASONS: tuple[Reason, ...] = ("language", "no_letters", "control")

# Words a line needs before its language is judged (see the module docstring).
MIN_WORDS = 3
# The identifier's probability of the source language at or below which a line is flagged.
SOURCE_AT_MOST = 0.01
# The languages the identifier chooses among (the model's source language is added): the
# languages a user is likely to paste by mistake. Restricting the set keeps a short line in
# the right language from going to a rare language (with all of py3langid's 139, six English
# 3-word starts of the 10,000 of the module docstring were flagged, "A taxi cab" as Venetian);
# a line in a language outside the set still goes to another language of the set.
CANDIDATES = (
    "ar", "cs", "da", "de", "el", "en", "es", "fi", "fr", "hu", "it", "ja", "ko", "nl", "no",
    "pl", "pt", "ro", "ru", "sv", "tr", "uk", "zh",
)  # fmt: skip
NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "hu": "Hungarian",
    "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "no": "Norwegian",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish",
    "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip
SHOWN = 5  # flagged lines a message lists before "and N more"

# A word: a run of letters, or one character of a script written without spaces (kana and
# CJK ideographs, a word or morpheme each).
_SPACELESS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
WORD = re.compile(rf"[{_SPACELESS}]|[^\W\d_{_SPACELESS}]+")
# The control characters (Unicode category Cc) that whitespace normalisation leaves in a line.
CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")


class LanguageWarning(UserWarning):
    """Lines that the language check flagged were translated (check_language="warn")."""


class LanguageCheckError(GmlmError):
    """Lines that the language check flagged refused the input (check_language="strict");
    `flags` are they."""

    def __init__(self, message: str, flags: Sequence[Flag]) -> None:
        super().__init__(message)
        self.flags = list(flags)


@dataclass(frozen=True)
class Flag:
    """A flagged line: its index (0-based), the reason ("language", "no_letters" or
    "control"), why in words, and for "language" the language found and the identifier's
    probability of it."""

    index: int
    reason: Reason
    why: str
    language: str | None = None
    confidence: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "reason": self.reason,
            "message": self.why,
            "language": self.language,
            "confidence": self.confidence,
        }


def language_name(code: str) -> str:
    """ "German (de)", or the code alone where it has no name here."""
    return f"{NAMES[code]} ({code})" if code in NAMES else code


def source_of(pair: str | None) -> str | None:
    """The source language of a language pair as a checkpoint's readers name it ("de-en":
    "de"), None for None."""
    return pair.partition("-")[0] or None if pair else None


def check_mode(mode: Any, name: str = "check_language") -> LanguageCheck:
    if mode not in CHECKS:
        raise GmlmError(f"{name}={mode!r}: choose warn, strict or off")
    return mode


def identifier(source: str) -> Any | None:
    """py3langid's identifier with probabilities, restricted to CANDIDATES and `source`;
    None where py3langid does not know `source`. Loaded once per set of languages (about
    0.5 s), kept for the process."""
    return _identifier(tuple(sorted({*CANDIDATES, source})))


@functools.lru_cache(maxsize=4)
def _identifier(languages: tuple[str, ...]) -> Any | None:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    found = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if not set(languages) <= set(found.labels):
        return None
    found.set_languages(list(languages))
    return found


def flag_lines(lines: Sequence[str], source: str) -> list[Flag]:
    """The flags of `lines` for a model that translates from `source` (see the module
    docstring), in line order."""
    judge = identifier(source)
    flags = []
    for index, line in enumerate(lines):
        text = normalize(line)
        if not text:
            continue
        if not any(ch.isalpha() for ch in text):
            flags.append(
                Flag(index, "no_letters", "no letters (only punctuation, digits, symbols or "
                "control characters): likely no text to translate")
            )  # fmt: skip
            continue
        control = CONTROL.search(text)
        if control is not None:
            flags.append(
                Flag(index, "control", f"a control character (U+{ord(control[0]):04X}) at "
                f"character {control.start() + 1}: not plain text (UTF-16 read as UTF-8, "
                "binary data, a terminal colour code?)")
            )  # fmt: skip
            continue
        if judge is None or len(WORD.findall(text)) < MIN_WORDS:
            continue
        language, confidence = judge.classify(text)
        if language == source:  # most lines: one pass, no ranking
            continue
        mine = dict(judge.rank(text))[source]
        if mine <= SOURCE_AT_MOST:
            flags.append(
                Flag(
                    index,
                    "language",
                    f"{_named(language, confidence)}, not the model's source language "
                    f"{_named(source, mine)}",
                    language,
                    round(float(confidence), 4),
                )
            )
    return flags


def _named(code: str, probability: float) -> str:
    """ "German (de, probability 0.982)"."""
    shown = f"{probability:.3f}" if probability >= 0.001 else "<0.001"
    return f"{NAMES.get(code, code)} ({code}, probability {shown})"


def listing(flags: Sequence[Flag], label: Callable[[int], str]) -> str:
    """One line per flag ("line 3: ..."; `label` names a line by its index), at most SHOWN,
    then "and N more"."""
    shown = [f"  {label(f.index)}: {f.why}" for f in flags[:SHOWN]]
    if len(flags) > SHOWN:
        shown.append(f"  and {len(flags) - SHOWN} more")
    return "\n".join(shown)


def check_lines(
    lines: Sequence[str],
    source: str | None,
    mode: LanguageCheck,
    origin: str = "input",
    stacklevel: int = 1,
) -> list[Flag]:
    """The flags of `lines` (see :func:`flag_lines`), none where `mode` is "off" or the
    source language is not known; "warn" names them in a LanguageWarning (attributed to the
    caller `stacklevel` frames up: 1, the caller of this function), "strict" raises a
    LanguageCheckError that names them. Lines are named "line N" from 1, `origin` names the
    input."""
    check_mode(mode)
    if mode == "off" or source is None:
        return []
    flags = flag_lines(lines, source)
    if not flags:
        return flags
    what = (
        f"{origin}: {len(flags)} of {len(lines)} lines may not be {language_name(source)} "
        "text, the model's source language"
    )
    shown = listing(flags, lambda i: f"line {i + 1}")
    if mode == "strict":
        raise LanguageCheckError(
            f"{what}; nothing was translated:\n{shown}\nfix or drop these lines, or leave out "
            '--strict (Python: check_language="warn") to translate them with a warning',
            flags,
        )
    warnings.warn(
        f'{what}; translated anyway (--strict, Python: check_language="strict", refuses '
        f"such input):\n{shown}",
        LanguageWarning,
        stacklevel=stacklevel + 1,
    )
    return flags


__all__ = [
    "CANDIDATES",
    "CHECKS",
    "MIN_WORDS",
    "REASONS",
    "SOURCE_AT_MOST",
    "Flag",
    "LanguageCheck",
    "LanguageCheckError",
    "LanguageWarning",
    "check_lines",
    "check_mode",
    "flag_lines",
    "identifier",
    "listing",
    "source_of",
]
