"""The evaluation's saved translations, eval/KEY.txt, and what made each (eval/made_with.json).

The evaluate stage writes each system's translations as soon as they are done, so that an
interrupted stage resumes without translating them again. A file is reused only when what the
stage would translate now is what made it: the same sources (split, count, text), the same
checkpoint (weights, tokenizer and decoding.json: its fingerprint), precision, batch size and
decoding settings. Otherwise it is made again, and the progress line says which setting
changed: a stage interrupted and rerun with another `evaluate.sentences` or `evaluate.bf16`
would else score old translations against new references, or mix two precisions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from gmlm.errors import GmlmError
from gmlm.io import atomic_write_text
from gmlm.records import Record

MADE_WITH = "made_with.json"


@dataclass(frozen=True, kw_only=True)
class MadeWith(Record):
    """What one system's translations were made with."""

    split: str
    sentences: int
    sources_sha256: str  # of the source lines, one "\n" after each
    checkpoint: str  # gmlm.checkpoint.fingerprint.checkpoint_fingerprint of the model
    precision: str
    batch_size: int
    decoding: dict[str, int]  # the system's settings (beam; steps, length_beam)

    def changes(self, now: MadeWith) -> list[str]:
        """What differs in `now`, for people: "sentences 50 -> 200", "the checkpoint"."""
        found = []
        for name in ("split", "sentences", "precision", "batch_size", "decoding"):
            old, new = getattr(self, name), getattr(now, name)
            if old != new:
                found.append(f"{name} {old} -> {new}")
        if self.sources_sha256 != now.sources_sha256 and self.sentences == now.sentences:
            found.append("the source sentences")
        if self.checkpoint != now.checkpoint:
            found.append("the checkpoint (weights, tokenizer or decoding.json)")
        return found


@dataclass(frozen=True, kw_only=True)
class SavedTranslations(Record):
    """eval/made_with.json: system key -> what made eval/KEY.txt."""

    systems: dict[str, MadeWith]


def sources_digest(sources: list[str]) -> str:
    digest = hashlib.sha256()
    for line in sources:
        digest.update(line.encode("utf-8") + b"\n")
    return digest.hexdigest()


def saved_translations(folder: Path, key: str, now: MadeWith) -> tuple[list[str] | None, str]:
    """The translations of system `key` saved in `folder` if `now` made them, else None, with
    why they are not reused ("" when reused, or when there are none)."""
    path = folder / f"{key}.txt"
    if not path.is_file():
        return None, ""
    made = _read(folder).systems.get(key)
    if made is None:
        return None, f"{path} has no record of what made it"
    changes = made.changes(now)
    if changes:
        return None, f"{path} was made with other settings ({', '.join(changes)})"
    return path.read_text(encoding="utf-8").splitlines(), ""


def save_translations(folder: Path, key: str, now: MadeWith, lines: list[str]) -> None:
    """Write eval/KEY.txt, then record what made it (a crash between the two leaves a file
    without a record, which is made again)."""
    atomic_write_text(folder / f"{key}.txt", "".join(line + "\n" for line in lines))
    systems = {**_read(folder).systems, key: now}
    SavedTranslations(systems=systems).write(folder / MADE_WITH)


def _read(folder: Path) -> SavedTranslations:
    """The records in `folder`; none when the file is missing or unreadable (every file is
    then made again, which is always safe)."""
    try:
        found = SavedTranslations.read_if_present(folder / MADE_WITH)
    except GmlmError:
        found = None
    return found or SavedTranslations(systems={})
