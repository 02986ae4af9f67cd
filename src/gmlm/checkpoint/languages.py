"""What a checkpoint translates: its source and target languages.

Training records them in meta.json (`src_lang`, `tgt_lang`, from its prepared dataset's
manifest), and `gmlm export` keeps them. An older checkpoint records none; its config.yaml
still names the prepared dataset it was trained on, whose manifest does, where that dataset
is on this machine and holds the checkpoint's tokenizer (a dataset prepared again at that
path since tells nothing). Commands that pair a checkpoint with text of a known language pair
check it here, so that a German-English model is never run or scored on English sources
without a word: `gmlm analyze table1` and a `gmlm reproduce` stage given a checkpoint
(:func:`check_languages`), and every command that runs a checkpoint on a prepared dataset,
whose manifest records its pair (:func:`check_dataset`: the analyses, `gmlm bench`, `gmlm
distill`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gmlm.checkpoint.config import recorded_training_data
from gmlm.checkpoint.meta import TOKENIZER_DIR, Meta
from gmlm.data.binarized import MANIFEST, PreparedDataset, read_manifest
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError

KEYS = ("src_lang", "tgt_lang")


@dataclass(frozen=True)
class Languages:
    """A checkpoint's language pair and what records it (`how`: "its meta.json"), or None
    and why it is not known (`how`: "its training data D is not on this machine")."""

    pair: tuple[str, str] | None
    how: str

    @property
    def name(self) -> str | None:
        """The pair as "de-en", or None where it is not known."""
        return None if self.pair is None else pair_name(self.pair)

    def describe(self) -> str:
        if self.name is None:
            return f"not checked: {self.how}"
        return f"{self.name}, as {self.how} records"


def pair_name(pair: tuple[str, str]) -> str:
    """("de", "en") as "de-en", the form meta.json's readers and messages use."""
    return f"{pair[0]}-{pair[1]}"


# What code that was handed no checkpoint knows of its languages (a Translator built in Python).
NOT_GIVEN = Languages(None, "no checkpoint was read")


def pair_of(record: dict[str, Any]) -> tuple[str, str] | None:
    """The (source, target) languages a meta.json or manifest records, or None."""
    src, tgt = (record.get(key) for key in KEYS)
    return (src, tgt) if isinstance(src, str) and isinstance(tgt, str) and src and tgt else None


def language_meta(pair: tuple[str, str] | None) -> dict[str, str]:
    """The meta.json entries that record `pair` (none for None)."""
    return {} if pair is None else dict(zip(KEYS, pair, strict=True))


def checkpoint_languages(folder: Path) -> Languages:
    """The languages of the checkpoint in `folder`: its meta.json's, else its training data's
    (see the module's docstring), else unknown and why."""
    pair = Meta.of(folder).pair
    if pair is not None:
        return Languages(pair, "its meta.json")
    data = recorded_training_data(folder)
    if data is None:
        return Languages(None, "its config.yaml names no training data")
    if not (data / MANIFEST).is_file():
        return Languages(None, f"its training data {data} is not on this machine")
    try:
        manifest = read_manifest(data)
        theirs = Tokenizer.load(data).fingerprint
        ours = Tokenizer.load(Path(folder) / TOKENIZER_DIR).fingerprint
    except GmlmError as err:
        return Languages(None, str(err))
    if theirs != ours:
        return Languages(None, f"{data} holds another tokenizer than the checkpoint's")
    pair = pair_of(manifest)
    if pair is None:
        return Languages(None, f"{data} records no languages")
    return Languages(pair, f"its training data {data}")


def check_languages(what: str, folder: Path, wanted: tuple[str, str], fix: str) -> Languages:
    """The languages of the checkpoint in `folder`, which `what` uses on `wanted` text; a
    different known pair is a GmlmError that ends with `fix` (in which "{pair}" stands for the
    checkpoint's pair, "{wanted}" for `wanted`)."""
    found = checkpoint_languages(folder)
    if found.pair is not None and found.pair != wanted:
        pair, want = pair_name(found.pair), pair_name(wanted)
        raise GmlmError(
            f"{what}: {folder} translates {pair} ({found.how} says so), not {want}; "
            + fix.format(pair=pair, wanted=want)
        )
    return found


def check_dataset(checkpoint: str | Path, languages: Languages, data: PreparedDataset) -> None:
    """The checkpoint in `checkpoint`, which translates `languages` (as it records them), run on
    the prepared dataset `data`: a GmlmError where both record a language pair and the pairs
    differ. Either unknown: not checked (:attr:`Languages.how` says why)."""
    wanted = pair_of(data.manifest)
    if wanted is None or languages.pair is None or languages.pair == wanted:
        return
    pair, want = pair_name(languages.pair), pair_name(wanted)
    raise GmlmError(
        f"{checkpoint} translates {pair} ({languages.how} says so), but the dataset {data.root} "
        f"holds {want} pairs (its {MANIFEST} says so); give a dataset prepared for {pair}, or "
        f"a {want} checkpoint"
    )
