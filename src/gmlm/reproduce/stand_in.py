"""The demo's stand-in for a missing Multi30k test set: gmlm's own example sentences.

When `data.examples_if_missing` is on and the Multi30k test files are not on this machine, the
data stage prepares `examples.{de,en}` (our text) as the test split and says why in its stage
record (:attr:`StageRecord.stand_in`); the evaluation then only translates them
(:class:`ExampleTranslations`, eval/examples.json), and the stages that need references skip
with :func:`needs_multi30k`'s message. The pipeline, the stages and the report share this.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gmlm.records import Record
from gmlm.reproduce.stage_record import StageRecord

EXAMPLES = Path(__file__).parent / "examples"  # .de and .en: gmlm's own example sentences
LANGUAGE_NAMES = {"de": "German", "en": "English"}  # the examples' languages
MULTI30K_SOURCE = "https://github.com/multi30k/dataset (folder data/task1/raw)"


def stand_in_reason(out: Path) -> str | None:
    """Why the finished data stage of run folder `out` prepared the example sentences instead
    of the corpus, or None (it prepared the corpus, or has not run)."""
    record = StageRecord.read_if_present(out / "stages" / "data.json")
    return None if record is None else record.stand_in


def needs_multi30k(what: str, reason: str) -> str:
    """The message of a stage that cannot run on the example sentences."""
    return (
        f"{what} needs the Multi30k test set ({reason}): get test_2016_flickr.de.gz and "
        f"test_2016_flickr.en.gz from {MULTI30K_SOURCE}"
    )


@dataclass(frozen=True, kw_only=True)
class ExampleTranslations(Record):
    """eval/examples.json: the example `sources` and each system's translations of them
    (system key -> one line per source), the systems' `labels` (key -> table label), and why
    they stood in for the test set (`stand_in`). No references, so no scores."""

    sources: tuple[str, ...]
    source_lang: str = "de"  # examples.de or examples.en, as the run's direction
    labels: dict[str, str]
    translations: dict[str, tuple[str, ...]]
    stand_in: str
