"""A checkpoint's own decoding defaults: the optional ``decoding.json`` of a checkpoint folder.

Some decoding settings are properties of one trained model rather than of the method: how far
its length predictor errs short (`RefinementOptions.length_shift`), the length penalty its
beam search scores best with. A checkpoint folder may record them, with how they were chosen::

    {"settings": {"length_shift": 1},
     "chosen_on": "valid split (1014 pairs), T=4 B=5: BLEU 38.15 at 0, 38.99 at 1, ..."}

Loading a checkpoint (`gmlm.load`, ``gmlm translate``, ``gmlm bench``, the analyses) reads the
file and validates its settings against the model's kind and configuration, so a bad file
fails at load, naming itself. They replace the class defaults of the decoding options,
in an options object too (its fields left at their class defaults); settings given explicitly
(flags, keyword overrides, an options object's other fields) still win. `gmlm export` copies
the file. `gmlm reproduce`'s `calibrate` stage writes it, choosing on the
validation split; by hand, write the JSON above (``chosen_on`` says how, for the next reader).
Training's own validation decodes with the class defaults, so its curves stay comparable.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gmlm.checkpoint.meta import DECODING_FILE as DECODING_FILE
from gmlm.decoding.options import decoding_options
from gmlm.errors import GmlmError
from gmlm.nn.config import ModelConfig
from gmlm.records import Record


@dataclass(frozen=True, kw_only=True)
class DecodingDefaults(Record):
    """The settings (field name -> value of the checkpoint kind's decoding options) and how
    they were chosen."""

    settings: dict[str, Any]  # open-ended: each value is checked against its options field
    chosen_on: str


def read_decoding_defaults(folder: Path, kind: str, config: ModelConfig) -> dict[str, Any]:
    """The decoding defaults recorded in checkpoint `folder` ({} without a decoding.json),
    checked against the model's kind and configuration."""
    path = Path(folder) / DECODING_FILE
    found = DecodingDefaults.read_if_present(path)
    if found is None:
        return {}
    try:
        decoding_options(kind, config, None, found.settings)
    except GmlmError as err:
        raise GmlmError(
            f"{path}: {err}. Fix or remove the file (it holds this checkpoint's decoding defaults)"
        ) from None
    return dict(found.settings)


def write_decoding_defaults(folder: Path, settings: dict[str, Any], chosen_on: str) -> None:
    """Record `settings` as checkpoint `folder`'s decoding defaults (atomically)."""
    DecodingDefaults(settings=dict(settings), chosen_on=chosen_on).write(
        Path(folder) / DECODING_FILE
    )
