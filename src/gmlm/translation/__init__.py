"""Raw text in, translations out: the :class:`Translator` of a checkpoint (batching, the
over-length policy, decoding settings) and sequence-level distillation, which translates a
dataset's training sources with an AR teacher.

    import gmlm

    translator = gmlm.load("runs/padir/checkpoints/best")   # a Translator
    translator.translate(["Ein Hund läuft."], steps=4)

    from gmlm.translation.distill import distill
    from gmlm.translation.distill_settings import DistillSettings

    distill("runs/teacher", "runs/data", "runs/distilled", DistillSettings(beam=5))

Command line: `gmlm translate`, `gmlm distill`. The names below are imported when first used,
so that `gmlm.translation.distill_settings` (the command line's) loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gmlm.lazy import lazy_names

if TYPE_CHECKING:
    from gmlm.translation.translator import OverLengthPolicy, Translator, load, resolve_device

_HOMES = {
    "OverLengthPolicy": "gmlm.translation.translator",
    "Translator": "gmlm.translation.translator",
    "load": "gmlm.translation.translator",
    "resolve_device": "gmlm.translation.translator",
}

__all__ = ["OverLengthPolicy", "Translator", "load", "resolve_device"]

__getattr__ = lazy_names(__name__, _HOMES)
