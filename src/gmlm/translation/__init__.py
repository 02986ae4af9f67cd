"""Raw text in, translations out: the :class:`Translator` of a checkpoint (batching, the
over-length policy, decoding settings) and sequence-level distillation, which translates a
dataset's training sources with an AR teacher.

    import gmlm

    translator = gmlm.load("runs/padir/checkpoints/best")   # a Translator
    translator.translate(["Ein Hund läuft."], steps=4)

    from gmlm.translation.distill import distill

    distill("runs/teacher", "runs/data", "runs/distilled", beam=5)

Command line: `gmlm translate`, `gmlm distill`.
"""

from gmlm.translation.translator import OverLengthPolicy, Translator, load, resolve_device

__all__ = ["OverLengthPolicy", "Translator", "load", "resolve_device"]
