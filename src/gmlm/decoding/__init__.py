"""Decoding: greedy and beam search for the autoregressive model (on its key/value cache) and
PaDIR's iterative refinement. Each is a pure init / step / finish trio plus a driver::

    from gmlm.decoding import SearchOptions, beam_search, RefinementOptions, refine

    nbest = beam_search(ar_model, src, SearchOptions(beam=5))      # per sentence, best first
    results = refine(padir_model, src, RefinementOptions(steps=4), seed=0)  # per sentence

PaDIR's initial random tokens are keyed by the seed and each sentence's own ids
(:mod:`gmlm.decoding.draws`), so a sentence's result does not depend on its batch.

Sources are (B, S) right-padded id tensors with EOS, as the data pipeline makes them; raw text
goes through :class:`gmlm.translation.Translator`. The settings of both decoders are declared
once, in :mod:`gmlm.decoding.options` (no torch there: the command line derives its flags
from them).

The names below are imported on first use (PEP 562), so that importing
`gmlm.decoding.options` (what `gmlm --help` does) does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gmlm.lazy import lazy_names

if TYPE_CHECKING:
    from gmlm.decoding.autoregressive import (
        BeamState,
        GreedyState,
        Hypothesis,
        beam_finish,
        beam_init,
        beam_search,
        beam_step,
        greedy_finish,
        greedy_init,
        greedy_search,
        greedy_step,
        max_lengths,
    )
    from gmlm.decoding.draws import sentence_keys
    from gmlm.decoding.options import DecodingOptions, RefinementOptions, SearchOptions
    from gmlm.decoding.refinement import (
        Refined,
        RefinementState,
        refine,
        refinement_finish,
        refinement_init,
        refinement_step,
    )
    from gmlm.decoding.scores import length_penalty

# Every name of __all__ and the module that defines it.
_HOMES: dict[str, str] = {
    "BeamState": "gmlm.decoding.autoregressive",
    "DecodingOptions": "gmlm.decoding.options",
    "GreedyState": "gmlm.decoding.autoregressive",
    "Hypothesis": "gmlm.decoding.autoregressive",
    "Refined": "gmlm.decoding.refinement",
    "RefinementOptions": "gmlm.decoding.options",
    "RefinementState": "gmlm.decoding.refinement",
    "SearchOptions": "gmlm.decoding.options",
    "beam_finish": "gmlm.decoding.autoregressive",
    "beam_init": "gmlm.decoding.autoregressive",
    "beam_search": "gmlm.decoding.autoregressive",
    "beam_step": "gmlm.decoding.autoregressive",
    "greedy_finish": "gmlm.decoding.autoregressive",
    "greedy_init": "gmlm.decoding.autoregressive",
    "greedy_search": "gmlm.decoding.autoregressive",
    "greedy_step": "gmlm.decoding.autoregressive",
    "length_penalty": "gmlm.decoding.scores",
    "max_lengths": "gmlm.decoding.autoregressive",
    "refine": "gmlm.decoding.refinement",
    "refinement_finish": "gmlm.decoding.refinement",
    "refinement_init": "gmlm.decoding.refinement",
    "refinement_step": "gmlm.decoding.refinement",
    "sentence_keys": "gmlm.decoding.draws",
}

__all__ = [
    "BeamState",
    "DecodingOptions",
    "GreedyState",
    "Hypothesis",
    "Refined",
    "RefinementOptions",
    "RefinementState",
    "SearchOptions",
    "beam_finish",
    "beam_init",
    "beam_search",
    "beam_step",
    "greedy_finish",
    "greedy_init",
    "greedy_search",
    "greedy_step",
    "length_penalty",
    "max_lengths",
    "refine",
    "refinement_finish",
    "refinement_init",
    "refinement_step",
    "sentence_keys",
]


__getattr__ = lazy_names(__name__, _HOMES)
