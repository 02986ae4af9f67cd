"""The setting of the input language check (:mod:`gmlm.translation.language_check`), declared
once: `gmlm translate`'s --strict is derived from the field (:mod:`gmlm.cli.options`), and a
`gmlm serve` request's "strict" field takes its help.

Torch-free, so that `gmlm translate --help` stays light.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field

from gmlm.settings import doc

STRICT_HELP = (
    "refuse the whole input, naming the flagged lines, instead of translating it with a "
    "warning per flagged line: a line of 3 words or more that is confidently another language "
    "than the checkpoint's source language (as it records it; a checkpoint whose languages "
    "are not known is not checked), or a line with no letters (only punctuation, digits, "
    "symbols or control characters such as NUL bytes)"
)


@dataclasses.dataclass(frozen=True)
class LanguageCheckSettings:
    """Whether flagged input lines are translated with a warning or refuse the input."""

    strict: bool = field(default=False, metadata=doc(STRICT_HELP))
