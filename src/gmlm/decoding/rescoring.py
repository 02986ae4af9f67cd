"""Rescoring PaDIR's candidates with an autoregressive model, before the final choice.

PaDIR scores each of a sentence's candidates with its own last pass (:mod:`gmlm.decoding.
refinement`). An autoregressive model of the same vocabulary can score them too: one
teacher-forced decoder pass over every candidate at once, no search. Adding ``weight`` times
its mean log-probability per token to PaDIR's score, and choosing by the sum, is the
"noisy parallel decoding" of Gu et al. (2018, arXiv 1711.02281) and what fairseq's
``--iter-decode-with-external-reranker`` does for its iterative refinement models (which
choose by the rescoring model alone). The cost is the rescoring model's encoder and one
decoder pass over the candidates; the passes of PaDIR are unchanged, and so is pruning
(which ranks by PaDIR's own score: the rescoring model sees only the candidates still in the
race at the end).

What is scored is each candidate's output tokens as :func:`gmlm.decoding.refinement.
output_mask` keeps them (its unchanged initial tokens and repeated tokens dropped), then EOS.
The repeated n-grams of more than one token and the repeated words that the final dedup
drops afterwards (on the host) are still in it: that would need a host read per candidate.

Tensor operations only, with shapes that depend on the batch's shapes alone: no host read.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.refinement import RefinementState, Rescore, output_mask
from gmlm.models.autoregressive import AutoregressiveModel, teacher_forcing_input
from gmlm.nn.config import ModelConfig


def candidate_targets(
    tokens: Tensor,
    initial: Tensor,
    lengths: Tensor,
    options: RefinementOptions,
    config: ModelConfig,
) -> Tensor:
    """(C, W) the output tokens of candidates with last argmax `tokens` (C, W), initial
    hypotheses `initial` (C, W) and lengths (C,) (EOS counted): the positions
    :func:`output_mask` keeps, in order, then EOS, right-padded with pad. A candidate keeps
    at most its length - 1 <= W - 1 tokens, so its EOS always fits."""
    count, width = tokens.shape
    keep = output_mask(tokens, initial, lengths, options)
    # Kept tokens go to their rank among the kept; the others to a spare last column.
    slot = torch.where(keep, keep.long().cumsum(1) - 1, width)
    targets = torch.full(
        (count, width + 1), config.pad_id, dtype=tokens.dtype, device=tokens.device
    )
    targets.scatter_(1, slot, tokens)
    targets = targets[:, :width]
    targets.scatter_(1, keep.sum(1, keepdim=True), config.eos_id)
    return targets


def mean_log_probs(
    model: AutoregressiveModel, src: Tensor, targets: Tensor, sentence: Tensor
) -> Tensor:
    """(C,) the mean log-probability per token (EOS included) that the autoregressive `model`
    gives each target row of `targets` (C, W) (right-padded, ending with EOS) as a
    translation of its source, src[sentence[c]] (src (B, S)): one encoder pass over the B
    sources and one teacher-forced decoder pass over the C rows."""
    config = model.config
    memory = model.encode(src).select(sentence)
    logits = model.decode(memory, teacher_forcing_input(targets, config)).logits.float()
    real = targets != config.pad_id
    picked = logits.gather(2, targets.masked_fill(~real, 0).unsqueeze(2)).squeeze(2)
    log_probs = (picked - logits.logsumexp(2)) * real
    return log_probs.sum(1) / real.sum(1)


def rescorer(
    model: AutoregressiveModel, src: Tensor, options: RefinementOptions, weight: float
) -> Rescore:
    """What :func:`gmlm.decoding.refinement.refine` adds to each candidate's score, for a
    decode of src (B, S): `weight` times `model`'s :func:`mean_log_probs` of its output."""

    @torch.no_grad()
    def scores(state: RefinementState) -> Tensor:
        targets = candidate_targets(
            state.tokens, state.initial, state.lengths, options, model.config
        )
        sentence = torch.arange(targets.shape[0], device=targets.device) // state.candidates
        return weight * mean_log_probs(model, src, targets, sentence)

    return scores


__all__ = ["Rescore", "candidate_targets", "mean_log_probs", "rescorer"]
