"""PaDIR refinement at fixed shapes: no host sync inside the passes, shapes from a few buckets.

The rules are :mod:`gmlm.decoding.refinement`'s, and the result is the same up to float
rounding; only the bookkeeping differs, for a GPU:

* every candidate runs in every pass, at one width: the batch's longest candidate rounded up
  to a bucket (:mod:`gmlm.decoding.buckets`), the extra positions padding. A candidate that
  stopped early (its next input equals its last) or was pruned is masked instead of leaving
  the batch: its tokens, log-probabilities and pass count stay as they were, which is what
  the eager loop keeps for it. So no pass reads anything on the host (no ``.item()``,
  ``.tolist()``, ``nonzero`` or shape that depends on data): the host queues the T passes
  without waiting, and a graph can record them (:func:`fixed_passes`);
* the sentences are padded to a bucket too (copies of the last one, dropped at the end), and
  the source width as well (masked keys), so a few signatures cover every batch;
* the choice of each sentence's candidate runs on the device after the last pass
  (:func:`gmlm.decoding.refinement.select`), inside the same graph;
* the host reads the device twice per decode: the candidate lengths once (to choose the
  width bucket; none when they come planned on the CPU, as :class:`gmlm.translation.Translator`
  plans them), and the chosen candidates once at the end, in two copies (integers, floats),
  one row per sentence; the host then only cuts each to its length and drops repeated
  n-grams (:func:`gmlm.decoding.refinement.selection_results`).

What it costs: the passes after every candidate has stopped still run, and padding is
computed; on a CPU, where a pass costs its arithmetic, the eager loop is faster, so
``gmlm translate`` uses this on CUDA devices only (``Translator(fixed_shapes=...)``).
Attention weights (``return_attention``) are the eager loop's alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from gmlm.decoding.buckets import bucket
from gmlm.decoding.cancel import checkpoint
from gmlm.decoding.draws import sentence_keys
from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.refinement import (
    PaddingStats,
    Refined,
    Selection,
    candidate_scores,
    initial_hypotheses,
    length_scores,
    log_probs_of,
    next_input,
    plan_candidates,
    prune_losers,
    pruning_keep,
    select,
    selection_results,
)
from gmlm.errors import GmlmError
from gmlm.models.padir import DecoderPositions, PadirEncoderOutput, PadirModel, ordinary_argmax
from gmlm.nn.attention import KVCache


@dataclass(frozen=True)
class Passes:
    """What :func:`fixed_passes` leaves of R sentences' C = R * K candidates: each sentence's
    choice (a :class:`gmlm.decoding.refinement.Selection` of R rows), and content (R,), the
    row-positions inside each sentence's candidate lengths that the passes computed."""

    selection: Selection
    content: Tensor


@dataclass(frozen=True)
class _Scoring:
    lengths: Tensor
    initial: Tensor
    length_log_probs: Tensor


@dataclass(frozen=True)
class _Candidates:
    """The candidates after the passes, as :func:`gmlm.decoding.refinement.select` reads them."""

    candidates: int
    lengths: Tensor
    initial: Tensor
    length_log_probs: Tensor
    tokens: Tensor
    token_log_probs: Tensor
    passes: Tensor
    pruned: Tensor
    history: tuple[Tensor, ...]


def fixed_passes(
    model: PadirModel,
    memory: KVCache,
    positions: DecoderPositions,
    initial: Tensor,
    lengths: Tensor,
    length_log_probs: Tensor,
    candidates: int,
    options: RefinementOptions,
) -> Passes:
    """The options.steps passes over the candidates with initial hypotheses `initial` (C, W)
    of `lengths` (C,), K = `candidates` per sentence, their cross-attention `memory` (C rows)
    and the decoder `positions` of width W, then each sentence's choice: no host sync, fixed
    shapes (module docstring)."""
    config = model.config
    width = initial.shape[1]
    index = torch.arange(width, device=initial.device)
    padding = index >= lengths.unsqueeze(1)
    is_eos = index == (lengths - 1).unsqueeze(1)
    content = ~padding & ~is_eos
    scoring = _Scoring(lengths, initial, length_log_probs)
    inputs, tokens = initial, initial
    token_log_probs = torch.zeros(initial.shape, device=initial.device)
    active = torch.ones(lengths.shape, dtype=torch.bool, device=initial.device)
    passes = torch.zeros(lengths.shape, dtype=torch.long, device=initial.device)
    pruned = torch.zeros_like(active)
    stoppable = options.early_stop and options.remask != "linear"
    history = []
    for step in range(1, options.steps + 1):
        checkpoint()  # a host flag, not a device read (gmlm.decoding.cancel)
        out = model.decode(memory, inputs, padding_mask=padding, positions=positions)
        best = ordinary_argmax(out.logits, content, is_eos, config).to(inputs.dtype)
        chosen = log_probs_of(out.logits, best).masked_fill(padding, 0.0)
        running = active.unsqueeze(1)
        tokens = torch.where(running, best, tokens)
        token_log_probs = torch.where(running, chosen, token_log_probs)
        passes = passes + active.long()
        if options.return_steps:
            history.append(tokens)
        if step == options.steps:
            break
        nxt = next_input(best, chosen, inputs, initial, content, step, options)
        done = (nxt == inputs).all(1) & stoppable
        survivors = pruning_keep(step, options)
        if survivors is not None and survivors < candidates:
            scores = candidate_scores(tokens, token_log_probs, scoring, options)
            pruned = pruned | prune_losers(scores, tokens, pruned, candidates, survivors)
            done = done | pruned
        active = active & ~done
        inputs = torch.where(active.unsqueeze(1), nxt, inputs)
    final = _Candidates(
        candidates,
        lengths,
        initial,
        length_log_probs,
        tokens,
        token_log_probs,
        passes,
        pruned,
        tuple(history),
    )
    content = (passes * lengths).view(-1, candidates).sum(1)
    return Passes(select(final, options), content)


@torch.no_grad()
def refine_fixed(
    model: PadirModel,
    src: Tensor,
    options: RefinementOptions | None = None,
    seed: int = 0,
    lengths: Tensor | None = None,
    stats: PaddingStats | None = None,
    encoded: PadirEncoderOutput | None = None,
) -> list[Refined]:
    """:func:`gmlm.decoding.refinement.refine` at fixed shapes (module docstring): the same
    arguments and results (one per sentence of src (B, S)); `stats` adds the row-positions
    the passes computed (every candidate, every pass, at the bucketed width)."""
    options = options or RefinementOptions()
    if options.return_attention:
        raise GmlmError(
            "return_attention: the fixed-shape decoder returns no attention weights; use "
            "gmlm.decoding.refine"
        )
    config = model.config
    # The host's one look at the lengths (none when they were planned on the CPU).
    enc, planned = plan_candidates(model, src, options, lengths, encoded, torch.device("cpu"))
    count, k = planned.shape
    width = bucket(int(planned.max()), config.max_target_len)
    rows = bucket(count)
    device = src.device
    pick = torch.tensor([*range(count), *[count - 1] * (rows - count)], device=device)
    source_width = bucket(enc.memory.shape[1], config.max_source_len)
    extra = source_width - enc.memory.shape[1]
    enc = PadirEncoderOutput(
        torch.nn.functional.pad(enc.memory, (0, 0, 0, extra)).index_select(0, pick),
        torch.nn.functional.pad(enc.padding_mask, (0, extra), value=True).index_select(0, pick),
        enc.length_state.index_select(0, pick),
    )
    per_sentence = planned.to(device).index_select(0, pick)
    flat = per_sentence.flatten()
    sentence = torch.arange(rows, device=device).repeat_interleave(k)
    length_log_probs = length_scores(model, enc, sentence, flat, options)
    keys = sentence_keys(src.index_select(0, pick), config.pad_id, seed)
    initial = initial_hypotheses(per_sentence, config, keys, options.init, width)
    memory = model.cross_memory(enc).select(sentence)
    positions = model.positions(width, project=True)
    # A graphed copy (gmlm.decoding.cuda_graphs) replays all the passes as one graph.
    run = getattr(model, "fixed_passes", None) or partial(fixed_passes, model)
    done = run(memory, positions, initial, flat, length_log_probs, k, options)
    # The copy back, in two transfers (integers, floats): the real sentences' choices.
    selection = done.selection.first(count).to_host()
    if stats is not None:
        stats.computed += options.steps * rows * k * width
        stats.content += int(done.content[:count].sum())
    return selection_results(selection, options)


__all__ = ["Passes", "fixed_passes", "refine_fixed"]
