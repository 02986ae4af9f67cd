"""The numeric settings of `gmlm data prepare` and `gmlm data bench`, each declared once: its
flag, help and default come from the field (:mod:`gmlm.cli.options`).

:class:`PrepareSettings` are the settings of :class:`gmlm.data.prepare.DataConfig` that the
command line sets, each declared here (DataConfig's field takes its default and range from
here) and placed in DataConfig by :data:`CONFIG_KEYS`; the reproduce pipeline's data stage is
this class plus the stage's corpus and switches (:class:`gmlm.reproduce.config.DataStage`).
:class:`DataBenchSettings` are what `gmlm data bench` times.

Torch-free, so that `gmlm data --help` stays light.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from gmlm.config import LENGTH, MAX_TOKENS, THREADS, TIMED, VOCAB_SIZE, WORLD_SIZE, check_settings
from gmlm.settings import doc


@dataclasses.dataclass(frozen=True)
class PrepareSettings:
    """The numbers of a prepared dataset that the command line sets (each field's help says
    what; its DataConfig key: CONFIG_KEYS)."""

    vocab_size: int = field(
        default=8000, metadata=doc("SentencePiece vocabulary size", range=VOCAB_SIZE)
    )
    max_len: int = field(
        default=256,
        metadata=doc(
            "longest sentence in tokens, counting the EOS the batches append; longer training "
            "pairs are dropped, as are valid/test rows the models cannot take",
            range=LENGTH,
        ),
    )
    threads: int = field(
        default=0,
        metadata=doc("threads for tokenizer training and encoding, 0: all cores", range=THREADS),
    )

    def validate(self) -> None:
        check_settings(self)


# Where each PrepareSettings field lives in DataConfig (as a KEY=VALUE override names it).
CONFIG_KEYS = {
    "vocab_size": "tokenizer.vocab_size",
    "max_len": "filter.max_len",
    "threads": "threads",
}


def config_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The PrepareSettings `values` (field name -> value) as DataConfig values, nested by
    section as a config file holds them ({"tokenizer": {"vocab_size": 400}})."""
    nested: dict[str, Any] = {}
    for name, value in values.items():
        *sections, key = CONFIG_KEYS[name].split(".")
        node = nested
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = value
    return nested


@dataclasses.dataclass(frozen=True)
class DataBenchSettings:
    """How `gmlm data bench` times the batch iterator (each field's help says what)."""

    split: str = field(default="train", metadata=doc("split to iterate"))
    max_tokens: int = field(
        default=4096, metadata=doc("padded tokens per batch at most", range=MAX_TOKENS)
    )
    epochs: int = field(default=5, metadata=doc("timed epochs after one warm-up", range=TIMED))
    world_size: int = field(
        default=1,
        metadata=doc("iterate as rank 0 of this many processes would", range=WORLD_SIZE),
    )

    def validate(self) -> None:
        check_settings(self)
