"""Raw parallel text and the language pairs that name it: the types every corpus reader returns.

The readers (`gmlm.data.corpora` for text files and Multi30k, `gmlm.data.bible`,
`gmlm.data.hf`) import these; `gmlm.data.corpora.read_corpus` dispatches to the readers. This
module imports none of them, so the dependencies run one way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gmlm.errors import GmlmError

PAIR_PATTERN = r"([a-z]{2,3})-([a-z]{2,3})"
_PAIR = re.compile(f"^{PAIR_PATTERN}$")


@dataclass
class ParallelText:
    """Aligned sentences: `src[i]` translates to `tgt[i]`.

    `keys` are stable ids used to carve splits (Bible verse ids); None means the source text.
    """

    src: list[str]
    tgt: list[str]
    keys: list[str] | None = None

    def __post_init__(self) -> None:
        if len(self.src) != len(self.tgt):
            raise ValueError("src and tgt must have the same length")
        if self.keys is not None and len(self.keys) != len(self.src):
            raise ValueError("keys must have one entry per pair")

    def __len__(self) -> int:
        return len(self.src)

    def select(self, indices: list[int]) -> ParallelText:
        return ParallelText(
            [self.src[i] for i in indices],
            [self.tgt[i] for i in indices],
            None if self.keys is None else [self.keys[i] for i in indices],
        )


@dataclass
class Corpus:
    """Raw parallel text by split ("train", and optionally "valid" and "test")."""

    name: str
    splits: dict[str, ParallelText]
    src_lang: str | None = None
    tgt_lang: str | None = None
    notes: list[str] = field(default_factory=list)


def parse_pair(text: str, spec: str) -> tuple[str, str]:
    """`de-en` -> ("de", "en"); a malformed pair is an error that names the corpus `spec`."""
    match = _PAIR.match(text)
    if not match:
        raise GmlmError(f"corpus '{spec}': '{text}' is not a language pair like de-en")
    return match.group(1), match.group(2)
