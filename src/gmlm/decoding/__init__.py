"""Decoding: greedy and beam search for the autoregressive model (on its key/value cache) and
PaDIR's iterative refinement. Each is a pure init / step / finish trio plus a driver::

    from gmlm.decoding import SearchOptions, beam_search, RefinementOptions, refine
    from gmlm.decoding import sentence_generators

    nbest = beam_search(ar_model, src, SearchOptions(beam=5))        # per sentence, best first
    generators = sentence_generators(seed=0, lines=range(len(src)))  # one per sentence
    results = refine(padir_model, src, RefinementOptions(steps=4), generators)

Sources are (B, S) right-padded id tensors with EOS, as the data pipeline makes them; raw text
goes through :class:`gmlm.translation.translator.Translator`.
"""

from gmlm.decoding.autoregressive import (
    BeamState,
    GreedyState,
    Hypothesis,
    SearchOptions,
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
from gmlm.decoding.refinement import (
    Refined,
    RefinementOptions,
    RefinementState,
    refine,
    refinement_finish,
    refinement_init,
    refinement_step,
    sentence_generators,
    sentence_seed,
)
from gmlm.decoding.scores import length_penalty

__all__ = [
    "BeamState",
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
    "sentence_generators",
    "sentence_seed",
]
