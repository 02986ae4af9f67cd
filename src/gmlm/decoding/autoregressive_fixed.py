"""Greedy and beam search at fixed shapes: no host sync inside a step, shapes from a few buckets.

The rules are :mod:`gmlm.decoding.autoregressive`'s (fairseq's beam search, GNMT length
penalty, the length limits and banned ids), and the hypotheses are the same up to float
rounding; only the bookkeeping differs, for a GPU:

* the self-attention cache is preallocated at the longest length limit of the batch rounded
  up to a bucket (:mod:`gmlm.decoding.buckets`), L positions, and each step writes its keys
  and values in place at the step's position, a 0-dim tensor on the device
  (:meth:`gmlm.models.AutoregressiveModel.decode_step_in_place`); later positions are masked;
* a sentence that is done (k finished hypotheses, or its length limit) keeps its rows in the
  batch, masked, instead of leaving it: its finished hypotheses stay as they were, which is
  what the eager search keeps for it. So a step reads nothing on the host and every step has
  the same shapes: one CUDA graph per signature replays every step of a search
  (:class:`gmlm.decoding.cuda_graphs.AutoregressiveGraphs`);
* the sentences are padded to a bucket (copies of the last one, dropped at the end), and the
  source width too (masked keys);
* the host reads the device once to check that no source is empty (the encoder's check),
  once for the length limits (to size the cache), once every
  :data:`SYNC_EVERY` steps to see whether every sentence is done, and once at the end, in one
  copy per dtype. A search of n steps therefore waits on the device about n / SYNC_EVERY
  times, not once or more per step; at most SYNC_EVERY - 1 steps run after the last sentence
  is done.

Greedy search is beam search with k = 1 (the eager greedy search gives the same hypothesis).
On a CPU, where a step costs its arithmetic, the eager search (which drops finished rows and
grows its cache one step at a time) is faster, so ``gmlm translate`` uses this on CUDA devices
only (``Translator(fixed_shapes=...)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import torch
from torch import Tensor

from gmlm.decoding.autoregressive import (
    Hypothesis,
    best_candidates,
    check_search_memory,
    constrained_log_probs,
    finished_hypotheses,
    max_lengths,
)
from gmlm.decoding.buckets import bucket
from gmlm.decoding.cancel import checkpoint
from gmlm.decoding.options import SearchOptions
from gmlm.decoding.scores import length_penalty
from gmlm.models.autoregressive import AutoregressiveModel
from gmlm.nn.attention import KVCache

SYNC_EVERY = 4
"""Steps between the host's looks at whether every sentence is done (module docstring)."""


@dataclass(frozen=True)
class FixedSearch:
    """A search's whole state, R sentences (bucketed) of k beams, N = R * k rows, cache
    width L; every step updates it in place.

    step: () the next position; cross_keys, cross_values: per decoder layer, the source's
    cross-attention keys/values (N, H, S, D/H), source_padding (N, S); past_keys,
    past_values: the self-attention cache (N, H, L, D/H) per layer; limits: (R,) length
    limits; live_tokens: (R, k, L) live prefixes, pad after them; live_log_probs: (R, k),
    -inf for a beam that holds nothing yet; finished_tokens (R, k, L), finished_log_probs,
    finished_scores (R, k) (-inf: empty, best first), finished_lengths (R, k) with EOS;
    done: (R,) sentences whose hypotheses are final."""

    step: Tensor
    cross_keys: tuple[Tensor, ...]
    cross_values: tuple[Tensor, ...]
    source_padding: Tensor
    past_keys: tuple[Tensor, ...]
    past_values: tuple[Tensor, ...]
    limits: Tensor
    live_tokens: Tensor
    live_log_probs: Tensor
    finished_tokens: Tensor
    finished_log_probs: Tensor
    finished_scores: Tensor
    finished_lengths: Tensor
    done: Tensor

    @property
    def width(self) -> int:
        """L, the cache's positions: the most steps the search can take."""
        return self.live_tokens.shape[2]

    def tensors(self) -> list[Tensor]:
        """Every tensor of the state, in a fixed order."""
        out: list[Tensor] = []
        for f in fields(self):
            value = getattr(self, f.name)
            out.extend(value if isinstance(value, tuple) else (value,))
        return out

    def empty_like(self) -> FixedSearch:
        """A state of the same shapes, dtypes and device (contents undefined)."""
        values: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                values[f.name] = tuple(torch.empty_like(t) for t in value)
            else:
                values[f.name] = torch.empty_like(value)
        return FixedSearch(**values)

    def load(self, other: FixedSearch) -> None:
        """Copy `other` (of the same shapes) into this state's tensors."""
        for mine, theirs in zip(self.tensors(), other.tensors(), strict=True):
            mine.copy_(theirs)


def fixed_search_start(
    model: AutoregressiveModel, src: Tensor, options: SearchOptions
) -> tuple[FixedSearch, int]:
    """Encode src (B, S) padded to a bucket of sentences and of source width, and the state
    of a search over it before its first step; with B, the real sentences (the first B)."""
    config = model.config
    options.validate(config)
    count, k = src.shape[0], options.beam
    rows = bucket(count)
    device = src.device
    pick = torch.tensor([*range(count), *[count - 1] * (rows - count)], device=device)
    extra = bucket(src.shape[1], config.max_source_len) - src.shape[1]
    padded = torch.nn.functional.pad(src, (0, extra), value=config.pad_id).index_select(0, pick)
    check_search_memory(config, options, padded)
    limits = max_lengths(padded, options, config)
    width = bucket(int(limits.max()), config.max_target_len)  # the host's look at the limits
    cross = model.cross_memory(model.encode(padded)).select(
        torch.arange(rows, device=device).repeat_interleave(k)
    )
    assert cross.padding_mask is not None
    heads = config.n_heads
    cache = (rows * k, heads, width, config.d_model // heads)
    dtype = cross.keys[0].dtype
    layers = config.n_decoder_layers
    live = torch.full((rows, k), -math.inf, device=device)
    live[:, 0] = 0.0
    tokens = torch.full((rows, k, width), config.pad_id, dtype=torch.long, device=device)
    state = FixedSearch(
        step=torch.zeros((), dtype=torch.long, device=device),
        cross_keys=tuple(cross.keys),
        cross_values=tuple(cross.values),
        source_padding=cross.padding_mask,
        past_keys=tuple(torch.zeros(cache, dtype=dtype, device=device) for _ in range(layers)),
        past_values=tuple(torch.zeros(cache, dtype=dtype, device=device) for _ in range(layers)),
        limits=limits,
        live_tokens=tokens,
        live_log_probs=live,
        finished_tokens=tokens.clone(),
        finished_log_probs=torch.full((rows, k), -math.inf, device=device),
        finished_scores=torch.full((rows, k), -math.inf, device=device),
        finished_lengths=torch.zeros((rows, k), dtype=torch.long, device=device),
        done=torch.zeros(rows, dtype=torch.bool, device=device),
    )
    return state, count


def fixed_search_step(
    model: AutoregressiveModel, state: FixedSearch, options: SearchOptions
) -> None:
    """One step of every beam, in place: :func:`gmlm.decoding.autoregressive.beam_step`'s
    rules with nothing read on the host (module docstring)."""
    config = model.config
    rows, k, width = state.live_tokens.shape
    step = state.step
    length = step + 1
    device = step.device
    previous = (step - 1).clamp(min=0).view(1, 1, 1).expand(rows, k, 1)
    last = state.live_tokens.gather(2, previous).view(rows * k, 1)
    last = torch.where(step == 0, torch.full_like(last, config.bos_id), last)
    cross = KVCache(list(state.cross_keys), list(state.cross_values), state.source_padding)
    past = KVCache(list(state.past_keys), list(state.past_values))
    logits = model.decode_step_in_place(last, step, cross, past)
    limits = state.limits.repeat_interleave(k)
    log_probs = constrained_log_probs(logits, length, limits, options, config)
    top, origin, token, ends = best_candidates(state.live_log_probs, log_probs, config)
    prefixes = state.live_tokens.gather(1, origin.unsqueeze(2).expand(-1, -1, width))
    is_eos = token == config.eos_id
    # Keep the k best finished hypotheses.
    penalty = length_penalty(length, options.length_penalty)
    pool_scores = torch.cat(
        [state.finished_scores, (top / penalty).masked_fill(~ends, -math.inf)], dim=1
    )
    scores, pick = pool_scores.topk(k, dim=1)
    pool_tokens = torch.cat([state.finished_tokens, prefixes], dim=1)
    pool_log_probs = torch.cat([state.finished_log_probs, top.masked_fill(~ends, -math.inf)], 1)
    pool_lengths = torch.cat(
        [state.finished_lengths, length.expand(token.shape).to(token.dtype)], dim=1
    )
    # A sentence already done keeps what it had (the eager search has dropped it).
    keep = state.done.unsqueeze(1)
    state.finished_tokens.copy_(
        torch.where(
            keep.unsqueeze(2),
            state.finished_tokens,
            pool_tokens.gather(1, pick.unsqueeze(2).expand(-1, -1, width)),
        )
    )
    state.finished_log_probs.copy_(
        torch.where(keep, state.finished_log_probs, pool_log_probs.gather(1, pick))
    )
    state.finished_scores.copy_(torch.where(keep, state.finished_scores, scores))
    state.finished_lengths.copy_(
        torch.where(keep, state.finished_lengths, pool_lengths.gather(1, pick))
    )

    # The best k candidates that do not end become the live beams.
    live_log_probs, choice = top.masked_fill(is_eos, -math.inf).topk(k, dim=1)
    live_tokens = prefixes.gather(1, choice.unsqueeze(2).expand(-1, -1, width))
    at_step = step.view(1, 1, 1).expand(rows, k, 1)
    live_tokens.scatter_(2, at_step, token.gather(1, choice).unsqueeze(2))
    state.live_tokens.copy_(live_tokens)
    state.live_log_probs.copy_(live_log_probs)
    cache_rows = torch.arange(rows, device=device).unsqueeze(1) * k + origin.gather(1, choice)
    for buffer in (*state.past_keys, *state.past_values):
        buffer.copy_(buffer.index_select(0, cache_rows.flatten()))
    state.done.copy_(state.done | scores.isfinite().all(1) | (state.limits <= length))
    state.step.add_(1)


def run_steps(state: FixedSearch, step: Callable[[], object]) -> None:
    """Call `step` until every sentence of `state` is done (looked at every SYNC_EVERY steps)
    or the cache is full; cancellation (gmlm.decoding.cancel) is checked before each step."""
    for index in range(state.width):
        if index and index % SYNC_EVERY == 0 and bool(state.done.all()):  # the host's look
            return
        checkpoint()
        step()


def fixed_search(
    model: AutoregressiveModel, state: FixedSearch, options: SearchOptions
) -> FixedSearch:
    """Every step of the search of `state`, eagerly, in place; `state` back (a graphed copy
    of the model replays them on a state of its own and returns that one:
    :class:`gmlm.decoding.cuda_graphs.AutoregressiveGraphs`)."""
    run_steps(state, partial(fixed_search_step, model, state, options))
    return state


@torch.no_grad()
def search_fixed(
    model: AutoregressiveModel, src: Tensor, options: SearchOptions | None = None
) -> list[list[Hypothesis]]:
    """Greedy (beam = 1) or beam search over src (B, S) at fixed shapes (module docstring):
    each sentence's n-best list (up to `beam`), best first, as
    :func:`gmlm.decoding.autoregressive.beam_search` gives it."""
    options = options or SearchOptions()
    state, count = fixed_search_start(model, src, options)
    run = getattr(model, "fixed_search", None)
    state = run(state, options) if run is not None else fixed_search(model, state, options)
    # The copy back, in two transfers (integers, floats), of the real sentences' hypotheses.
    tokens = state.finished_tokens[:count]
    integers = torch.cat([tokens.flatten(), state.finished_lengths[:count].flatten()]).cpu()
    floats = torch.cat([state.finished_log_probs[:count], state.finished_scores[:count]]).cpu()
    token_ids, lengths = integers.split([tokens.numel(), integers.numel() - tokens.numel()])
    log_probs, scores = floats.split(count)
    return finished_hypotheses(
        token_ids.view(tokens.shape), lengths.view(count, -1), log_probs, scores
    )


__all__ = [
    "SYNC_EVERY",
    "FixedSearch",
    "fixed_search",
    "fixed_search_start",
    "fixed_search_step",
    "run_steps",
    "search_fixed",
]
