"""Greedy and beam search for the autoregressive model, on its key/value cache.

Each decoder is a pair of pure functions over a small frozen state, plus a driver::

    state = greedy_init(model, src, options)        # encode once, empty cache
    while state.rows.numel():                       # sentences still decoding
        state = greedy_step(model, state, options)  # one token for every active row
    hyps = greedy_finish(state, options)

Finished work leaves the computation: a greedy row that emitted EOS, and a sentence whose
beams are all finished, are dropped from the cache with ``DecoderCache.select``, so later
steps run on fewer rows.

Lengths count the EOS, like ``ModelConfig.max_target_len``. Sentence i may output at most
``min(floor(max_len_a * src_len_i + max_len_b), max_target_len)`` tokens (src_len_i counts
the source EOS, ``max_length`` replaces the formula); at that length EOS is forced, so every
hypothesis ends with EOS. EOS is refused before ``min_length``. Special ids other than EOS
are never output (see :func:`banned_tokens`). The constraints mask the
model's log-probabilities without renormalising them, so scores stay the model's own.

Beam search follows fairseq: every step expands each live beam by every token and keeps the
best 2k candidates; those ending in EOS among the first k are finished hypotheses, and the
best k others are the new live beams. A sentence is done when it has k finished hypotheses
(or reaches its length limit). Hypotheses are ranked by the GNMT length-normalised score of
:mod:`gmlm.decoding.scores` (length_penalty alpha = 0.6 by default). With k = 1 this is
exactly greedy search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from gmlm.decoding.cancel import checkpoint
from gmlm.decoding.options import SearchOptions
from gmlm.decoding.scores import length_penalty
from gmlm.memory import check_memory
from gmlm.models.autoregressive import AutoregressiveModel, DecoderCache
from gmlm.nn.config import ModelConfig


@dataclass(frozen=True)
class Hypothesis:
    """tokens: output ids without BOS/EOS; log_prob: summed log-probability, EOS included;
    score: log_prob / length_penalty(len(tokens) + 1)."""

    tokens: list[int]
    log_prob: float
    score: float


def max_lengths(src: Tensor, options: SearchOptions, config: ModelConfig) -> Tensor:
    """(B,) the longest output (EOS counted) allowed for each source of src (B, S)."""
    if options.max_length is not None:
        limit = torch.full((src.shape[0],), options.max_length, device=src.device)
    else:
        src_lengths = (src != config.pad_id).sum(1)
        limit = (options.max_len_a * src_lengths + options.max_len_b).floor().long()
    return limit.clamp(1, config.max_target_len)


def search_bytes(config: ModelConfig, options: SearchOptions, batch: int, src_len: int) -> int:
    """Bytes greedy or beam search keeps alive at its last step over `batch` sources of
    `src_len` tokens (EOS counted), a lower bound of its peak: the decoder cache of every beam
    (self-attention keys and values of every output position and the source's cross-attention
    ones, in every layer) and four float32 (rows, V) score tensors (logits, log-probabilities,
    constrained, summed with the beams' scores)."""
    if options.max_length is not None:
        length = options.max_length
    else:
        length = math.floor(options.max_len_a * src_len + options.max_len_b)
    length = max(1, min(length, config.max_target_len))
    cache = 2 * config.n_decoder_layers * (length + src_len) * config.d_model
    return 4 * batch * options.beam * (cache + 4 * config.vocab_size)


def check_search_memory(config: ModelConfig, options: SearchOptions, src: Tensor) -> None:
    """A :class:`gmlm.memory.MemoryLimitError` before decoding src (B, S) if its estimated
    memory (:func:`search_bytes`) exceeds what the device has free."""
    batch, width = src.shape
    what = "beam search" if options.beam > 1 else "greedy search"
    check_memory(
        search_bytes(config, options, batch, width),
        f"{what} of {batch} sentence(s) of up to {width} tokens with beam={options.beam} "
        f"(vocabulary {config.vocab_size}, max_target_len {config.max_target_len})",
        "lower the beam (--beam) or the sentences per batch (--batch-size)",
        device=str(src.device),
    )


def banned_tokens(config: ModelConfig, device: torch.device) -> Tensor:
    """(V,) True at the special ids other than EOS, which are never output: pad would be
    taken for padding, BOS/[MASK]/[LENGTH] are control symbols and <unk> never occurs in the
    byte-fallback training data."""
    banned = torch.arange(config.vocab_size, device=device) < config.n_special
    banned[config.eos_id] = False
    return banned


def constrained_log_probs(
    logits: Tensor,
    length: int | Tensor,
    limits: Tensor,
    options: SearchOptions,
    config: ModelConfig,
) -> Tensor:
    """Log-probabilities (N, V) of the next token from logits (N, V), where the token would
    make the output `length` long (EOS counted; an int, or a 0-dim tensor on the device that
    is never read on the host) and row n may be at most limits[n] long."""
    log_probs = logits.float().log_softmax(-1)
    log_probs = log_probs.masked_fill(banned_tokens(config, logits.device), -math.inf)
    is_eos = torch.arange(log_probs.shape[1], device=logits.device) == config.eos_id
    at_limit = (limits <= length).unsqueeze(1)
    too_early = length < options.min_length
    if isinstance(too_early, Tensor):
        log_probs = log_probs.masked_fill(is_eos & ~at_limit & too_early, -math.inf)
    elif too_early:
        log_probs = log_probs.masked_fill(is_eos & ~at_limit, -math.inf)
    return log_probs.masked_fill(at_limit & ~is_eos, -math.inf)


# --- greedy ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GreedyState:
    """step: tokens emitted so far by the active rows.
    rows: (A,) sentence index of each active row; cache: their decoder cache (A rows);
    last: (A, 1) the token each feeds next (BOS first); limits: (A,) their length limits.
    tokens: (B, L) every sentence's output so far, pad-filled; log_probs: (B,) their sums;
    lengths: (B,) output length with EOS once finished, else 0."""

    step: int
    rows: Tensor
    cache: DecoderCache
    last: Tensor
    limits: Tensor
    tokens: Tensor
    log_probs: Tensor
    lengths: Tensor


@torch.no_grad()
def greedy_init(model: AutoregressiveModel, src: Tensor, options: SearchOptions) -> GreedyState:
    """Encode src (B, S) (right-padded, EOS-terminated) and start every sentence at BOS."""
    config = model.config
    options.validate(config)
    check_search_memory(config, options, src)
    limits = max_lengths(src, options, config)
    batch = src.shape[0]
    return GreedyState(
        step=0,
        rows=torch.arange(batch, device=src.device),
        cache=model.start_cache(model.encode(src)),
        last=torch.full((batch, 1), config.bos_id, device=src.device),
        limits=limits,
        tokens=torch.full((batch, int(limits.max())), config.pad_id, device=src.device),
        log_probs=torch.zeros(batch, device=src.device),
        lengths=torch.zeros(batch, dtype=torch.long, device=src.device),
    )


@torch.no_grad()
def greedy_step(
    model: AutoregressiveModel, state: GreedyState, options: SearchOptions
) -> GreedyState:
    """Emit the most likely next token of every active row; drop the rows that emitted EOS."""
    config = model.config
    logits, cache = model.decode_step(state.last, state.cache)
    length = state.step + 1
    log_probs = constrained_log_probs(logits[:, -1], length, state.limits, options, config)
    best, token = log_probs.max(-1)
    rows = state.rows
    tokens = state.tokens.index_put((rows, torch.full_like(rows, state.step)), token)
    finished = token == config.eos_id
    lengths = state.lengths.index_put((rows[finished],), torch.tensor(length, device=rows.device))
    keep = (~finished).nonzero().squeeze(1)
    if keep.numel() < rows.numel():
        cache = cache.select(keep)
    return GreedyState(
        step=length,
        rows=rows[keep],
        cache=cache,
        last=token[keep].unsqueeze(1),
        limits=state.limits[keep],
        tokens=tokens,
        log_probs=state.log_probs.index_add(0, rows, best),
        lengths=lengths,
    )


def greedy_finish(state: GreedyState, options: SearchOptions) -> list[Hypothesis]:
    """One hypothesis per sentence, in input order (call once no row is active)."""
    scores = state.log_probs / length_penalty(state.lengths, options.length_penalty)
    rows = zip(
        state.tokens.tolist(),
        state.lengths.tolist(),
        state.log_probs.tolist(),
        scores.tolist(),
        strict=True,
    )
    return [Hypothesis(t[: n - 1], lp, s) for t, n, lp, s in rows]


def greedy_search(
    model: AutoregressiveModel, src: Tensor, options: SearchOptions | None = None
) -> list[Hypothesis]:
    """Greedy decoding of src (B, S): one hypothesis per sentence."""
    options = options or SearchOptions()
    state = greedy_init(model, src, options)
    while state.rows.numel():
        checkpoint()  # stops here when nobody waits any more (gmlm.decoding.cancel)
        state = greedy_step(model, state, options)
    return greedy_finish(state, options)


# --- beam search ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BeamState:
    """step: tokens emitted so far by the live beams.
    rows: (A,) sentence index of each active sentence; cache: their decoder cache, A * k
    rows, the k beams of a sentence adjacent; live_tokens: (A, k, step) live prefixes;
    live_log_probs: (A, k), -inf for a beam that holds nothing yet; limits: (A,).
    finished_tokens: (B, k, L) finished hypotheses (without EOS), pad-filled;
    finished_log_probs, finished_scores: (B, k), -inf at empty slots, best first;
    finished_lengths: (B, k) their lengths with EOS."""

    step: int
    rows: Tensor
    cache: DecoderCache
    live_tokens: Tensor
    live_log_probs: Tensor
    limits: Tensor
    finished_tokens: Tensor
    finished_log_probs: Tensor
    finished_scores: Tensor
    finished_lengths: Tensor


@torch.no_grad()
def beam_init(model: AutoregressiveModel, src: Tensor, options: SearchOptions) -> BeamState:
    """Encode src (B, S) once and start k beams per sentence, all at BOS (only the first
    counts until the beams diverge)."""
    config = model.config
    options.validate(config)
    check_search_memory(config, options, src)
    k = options.beam
    batch, device = src.shape[0], src.device
    limits = max_lengths(src, options, config)
    cache = model.start_cache(model.encode(src))
    live = torch.full((batch, k), -math.inf, device=device)
    live[:, 0] = 0.0
    empty = torch.full((batch, k), -math.inf, device=device)
    return BeamState(
        step=0,
        rows=torch.arange(batch, device=device),
        cache=cache.select(torch.arange(batch, device=device).repeat_interleave(k)),
        live_tokens=torch.zeros((batch, k, 0), dtype=torch.long, device=device),
        live_log_probs=live,
        limits=limits,
        finished_tokens=torch.full(
            (batch, k, int(limits.max())), config.pad_id, dtype=torch.long, device=device
        ),
        finished_log_probs=empty,
        finished_scores=empty,
        finished_lengths=torch.zeros((batch, k), dtype=torch.long, device=device),
    )


def best_candidates(
    live_log_probs: Tensor, log_probs: Tensor, config: ModelConfig
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The 2k best one-token extensions of each sentence's k live beams, (A, k) summed
    log-probabilities, by next-token log-probabilities (A * k, V): their summed
    log-probabilities (A, 2k), best first, the beam each extends, its token, and whether it
    finishes a hypothesis (EOS among the best k, from a beam that holds something)."""
    active, k = live_log_probs.shape
    vocab = log_probs.shape[1]
    totals = live_log_probs.unsqueeze(2) + log_probs.view(active, k, vocab)
    top, flat = totals.view(active, k * vocab).topk(2 * k, dim=1)
    token = flat % vocab
    first_k = torch.arange(2 * k, device=top.device) < k
    return top, flat // vocab, token, (token == config.eos_id) & first_k & top.isfinite()


@torch.no_grad()
def beam_step(model: AutoregressiveModel, state: BeamState, options: SearchOptions) -> BeamState:
    """Extend every live beam by one token; retire the sentences with k finished hypotheses."""
    config = model.config
    active, k = state.live_log_probs.shape
    step, length = state.step, state.step + 1
    device = state.rows.device
    if step == 0:
        last = torch.full((active * k, 1), config.bos_id, device=device)
    else:
        last = state.live_tokens[:, :, -1].reshape(-1, 1)
    logits, cache = model.decode_step(last, state.cache)
    limits = state.limits.repeat_interleave(k)
    log_probs = constrained_log_probs(logits[:, -1], length, limits, options, config)
    top, origin, token, ends = best_candidates(state.live_log_probs, log_probs, config)
    prefixes = state.live_tokens.gather(1, origin.unsqueeze(2).expand(-1, -1, step))
    is_eos = token == config.eos_id
    penalty = float(length_penalty(length, options.length_penalty))
    rows = state.rows
    width = state.finished_tokens.shape[2]
    new_tokens = torch.nn.functional.pad(prefixes, (0, width - step), value=config.pad_id)
    pool_scores = torch.cat(
        [state.finished_scores[rows], (top / penalty).masked_fill(~ends, -math.inf)], dim=1
    )
    scores, pick = pool_scores.topk(k, dim=1)
    pool_tokens = torch.cat([state.finished_tokens[rows], new_tokens], dim=1)
    pool_log_probs = torch.cat(
        [state.finished_log_probs[rows], top.masked_fill(~ends, -math.inf)], dim=1
    )
    pool_lengths = torch.cat([state.finished_lengths[rows], torch.full_like(token, length)], dim=1)
    finished_tokens = state.finished_tokens.index_copy(
        0, rows, pool_tokens.gather(1, pick.unsqueeze(2).expand(-1, -1, width))
    )
    finished_log_probs = state.finished_log_probs.index_copy(
        0, rows, pool_log_probs.gather(1, pick)
    )
    finished_scores = state.finished_scores.index_copy(0, rows, scores)
    finished_lengths = state.finished_lengths.index_copy(0, rows, pool_lengths.gather(1, pick))

    # The best k candidates that do not end become the live beams.
    live_log_probs, choice = top.masked_fill(is_eos, -math.inf).topk(k, dim=1)
    live_origin = origin.gather(1, choice)
    live_tokens = torch.cat(
        [
            prefixes.gather(1, choice.unsqueeze(2).expand(-1, -1, step)),
            token.gather(1, choice).unsqueeze(2),
        ],
        dim=2,
    )

    done = scores.isfinite().all(1) | (state.limits <= length)
    keep = (~done).nonzero().squeeze(1)
    cache_rows = (keep.unsqueeze(1) * k + live_origin[keep]).flatten()
    # A sentence's k rows of cross-attention keys/values are the same: reordering its beams
    # leaves them as they are; only the rows of retired sentences go.
    cross = cache.cross
    if keep.numel() < active:
        cross = cross.select((keep.unsqueeze(1) * k + torch.arange(k, device=device)).flatten())
    return BeamState(
        step=length,
        rows=rows[keep],
        cache=DecoderCache(cross, cache.past.select(cache_rows)),
        live_tokens=live_tokens[keep],
        live_log_probs=live_log_probs[keep],
        limits=state.limits[keep],
        finished_tokens=finished_tokens,
        finished_log_probs=finished_log_probs,
        finished_scores=finished_scores,
        finished_lengths=finished_lengths,
    )


def beam_finish(state: BeamState) -> list[list[Hypothesis]]:
    """Each sentence's finished hypotheses, best score first (call once none is active)."""
    return finished_hypotheses(
        state.finished_tokens,
        state.finished_lengths,
        state.finished_log_probs,
        state.finished_scores,
    )


def finished_hypotheses(
    finished_tokens: Tensor,
    finished_lengths: Tensor,
    finished_log_probs: Tensor,
    finished_scores: Tensor,
) -> list[list[Hypothesis]]:
    """Each sentence's hypotheses from a search's finished slots, (B, k, L) tokens and
    (B, k) lengths (EOS counted), log-probabilities and scores (-inf: an empty slot), kept
    best first; the slots with a finite score, in their order."""
    results = []
    for tokens, lengths, log_probs, scores in zip(
        finished_tokens.tolist(),
        finished_lengths.tolist(),
        finished_log_probs.tolist(),
        finished_scores.tolist(),
        strict=True,
    ):
        results.append(
            [
                Hypothesis(t[: n - 1], lp, s)
                for t, n, lp, s in zip(tokens, lengths, log_probs, scores, strict=True)
                if math.isfinite(s)
            ]
        )
    return results


def beam_search(
    model: AutoregressiveModel, src: Tensor, options: SearchOptions | None = None
) -> list[list[Hypothesis]]:
    """Beam search over src (B, S): each sentence's n-best list (up to `beam`), best first."""
    options = options or SearchOptions(beam=5)
    state = beam_init(model, src, options)
    while state.rows.numel():
        checkpoint()
        state = beam_step(model, state, options)
    return beam_finish(state)
