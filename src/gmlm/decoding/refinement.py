"""PaDIR inference: iterative refinement of whole hypotheses (docs/DESIGN.md section 3).

Pure ``init`` / ``step`` / ``finish`` functions over a small frozen state, plus a driver::

    state = refinement_init(model, src, options, seed=0)      # encode once, C candidates
    while state.rows.numel():                                  # candidates still refining
        state = refinement_step(model, state, options)         # one decoder pass over them
    results = refinement_finish(state, options)                # post-process, pick the best

Candidates: the top ``length_beam`` predicted lengths N of each sentence (each first moved by
``length_shift``), each also moved by every ``length_offsets`` entry, each started from
``random_starts`` different initial hypotheses (N - 1 random ordinary tokens then EOS, or
[MASK] tokens); K = length_beam * (1 + len(length_offsets)) * random_starts candidates per
sentence, sharing the encoding.

Randomness, so that a sentence's result never depends on where it stands: candidate k's
initial tokens are a counter-based draw keyed by the run's seed and the sentence's own source
ids (:mod:`gmlm.decoding.draws`), made on the model's device. They depend on the seed, the
sentence, k and the position only: not on the other rows, the batch width, the line of a
file or the order in which sentences are decoded, so a sentence repeated in a file translates
alike. What can still differ with the batch is float rounding (padding changes the width of
every matrix product), which moves an argmax only at a near-tie.

A pass feeds a hypothesis x_t to the decoder and takes the argmax y_t at every position:
positions past the length stay pad, the last one stays EOS, the others take the best
*ordinary* token (special ids are never output). The next input x_{t+1} is y_t, except
that before the final pass

* stutter remasking replaces every token equal to its left neighbour by that position's
  previous input token (``"previous"``) or initial token (``"initial"``); with
  ``stutter_ngram`` = N > 1, the second copy of every immediately repeated n-gram too,
  n = 1..N (tokens[i:i+n] == tokens[i+n:i+2n]: "in a field in a field");
* Mask-Predict style remasking (``remask``) resets the least confident positions (lowest
  probability of their argmax) to their initial token: a fixed fraction every pass
  (``"constant"``) or a share falling linearly to zero over the passes (``"linear"``,
  Ghazvininejad et al. 2019: n = floor(N_content * (T - t) / T) after pass t).

The output of a candidate is y of its last pass. A candidate stops early once x_{t+1} = x_t:
the next input would be the same, so every later pass would repeat this one, and stopping
changes nothing but the cost. Stopped candidates leave the batch (their rows of the input
and of the cross-attention memory are dropped), so later passes only run the others. The
linear schedule changes the input by design, so with it every candidate runs all T passes.

Each candidate is scored from the log-probabilities of its last argmax under its last pass
(``selection``): their mean over every position, EOS included (the default), their sum (as
the paper describes it; it favours the shortest of the B lengths), or the authors' release's
rule, the sum over the content tokens that changed from the random initial
hypothesis (EOS excluded); the token part is divided by the GNMT length penalty of the length
(alpha = 0 by default) and ``length_score_weight`` times the length predictor's log-probability of
the length is added. Each sentence keeps its best candidate. Candidates of a sentence with
the same last argmax (same length, same tokens: several random starts that converged) are
one candidate with the score of the lowest-index one, which wins their tie; so the choice
never rests on float noise between equal hypotheses. Then tokens still equal to their
random initial token are dropped (the model never changed them), and tokens equal to the
previous kept token (stutter); with ``stutter_ngram`` = N > 1, then the second copy of every
immediately repeated n-gram of the kept tokens, n = 1..N, again until none is left (dropping
one can bring two copies of another together). The authors' release scores only the tokens
that survive this filtering; we score before it, because otherwise a candidate gains from
every position the model left unchanged, i.e. from the positions it is least sure of (on a
small reversal task this picked a wrong-length candidate for most sentences).

Pruning (``prune_after`` = t > 0, ``prune_keep`` = k_1, k_2, ...): after pass t, each
sentence's candidates are ranked by the same score as the final choice (their last argmax and
its log-probabilities, identical hypotheses as one candidate at their lowest index, equal
scores to the lower index) and all but the best k_1 leave the batch like stopped ones, so the
later passes run (and pad to the width of) the survivors alone; after pass t + 1 the best k_2
of those stay, and so on (the counts may not increase). A pruned candidate keeps its tokens
of the pass it was pruned after but can no longer be chosen. Pruning ranks a sentence's own
candidates only, so a sentence's result still does not depend on its batch. Pruning after
the last pass, or keeping all K, changes nothing.

Defaults follow the paper and docs/DESIGN.md section 3: T = 4 passes, 5 lengths, one random
start, no offsets, the model config's initial tokens, stutter remasking from the previous
pass's tokens, dropping unchanged initial tokens and final stutter, no length penalty, no
Mask-Predict remasking. Three depart from it, each chosen on validation data: the *mean*
selection, pruning (each sentence's best 3 candidates after pass 1, its best 2 after pass 2)
and stutter n-grams of up to 4 tokens: why, and the evidence, in docs/DESIGN.md section 7.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor

from gmlm.decoding.cancel import checkpoint
from gmlm.decoding.draws import keyed_tokens, sentence_keys
from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.scores import length_penalty
from gmlm.memory import check_memory
from gmlm.models.padir import (
    DecoderPositions,
    PadirEncoderOutput,
    PadirModel,
    ordinary_argmax,
)
from gmlm.nn.attention import KVCache
from gmlm.nn.config import ModelConfig


@dataclass(frozen=True)
class RefinementState:
    """Candidates c = 0 .. C-1, K per sentence (sentence c // K), padded to width W.

    step: passes done. rows: (A,) the candidates still refining; memory: their encoder
    cross-attention keys/values; inputs: (A, W_a) their next decoder inputs.
    lengths: (C,) candidate lengths with EOS; source_lengths: (C,) their sources' lengths;
    length_log_probs: (C,) the length predictor's log-probability of each candidate length
    (zeros unless options.length_score_weight is set);
    initial: (C, W) initial hypotheses;
    tokens: (C, W) each candidate's last argmax (its initial hypothesis before any pass);
    token_log_probs: (C, W) their log-probabilities under that pass, 0 at padding;
    passes: (C,) decoder passes run per candidate;
    pruned: (C,) True at candidates dropped by pruning (``prune_after``), never chosen;
    history: with return_steps, tokens after each pass so far, (C, W) each;
    self_attention: (C, H, W, W) and cross_attention: (C, H, W, S), last layer, last pass,
    0 at padding queries, with return_attention (else None);
    positions: the decoder's position information by pass width, made once for all the
    passes of that width (with the positional attention projections: no pass changes them);
    computed, content: row-positions the passes so far computed, and those of them inside a
    candidate's length (see PaddingStats).

    The active rows are in ascending order of length; a pass runs them as groups of similar
    length (:func:`width_groups`), each at its own width."""

    step: int
    candidates: int
    rows: Tensor
    memory: KVCache
    inputs: Tensor
    lengths: Tensor
    source_lengths: Tensor
    length_log_probs: Tensor
    initial: Tensor
    tokens: Tensor
    token_log_probs: Tensor
    passes: Tensor
    pruned: Tensor
    history: tuple[Tensor, ...]
    self_attention: Tensor | None
    cross_attention: Tensor | None
    positions: Mapping[int, DecoderPositions]
    computed: int = 0
    content: int = 0


@dataclass(frozen=True)
class Refined:
    """One sentence's result.

    tokens: output ids (no EOS), after post-processing. score: the selection score, i.e.
    log_prob / length_penalty(length); log_prob: summed log-probability of `raw` and the EOS.
    candidate: index (0 .. K-1) of the chosen candidate; length: its length with EOS;
    passes: decoder passes it ran; candidate_scores: all K scores (a candidate whose final
    argmax equals a lower-index one's carries that one's score, see `merge_identical`; -inf
    for a candidate dropped by pruning).
    raw: the chosen candidate's last argmax before post-processing (no EOS, length - 1 ids);
    attention positions refer to it. steps: with return_steps, its initial hypothesis then
    its hypothesis after each of the T passes (repeated after an early stop), without EOS.
    self_attention (H, N, N) and cross_attention (H, N, S): last decoder layer, last pass,
    over the length-N candidate and the S source tokens (EOS included), with
    return_attention.
    """

    tokens: list[int]
    score: float
    log_prob: float
    candidate: int
    length: int
    passes: int
    candidate_scores: list[float]
    raw: list[int]
    steps: list[list[int]]
    self_attention: Tensor | None = None
    cross_attention: Tensor | None = None


@dataclass
class PaddingStats:
    """Row-positions the decoder passes computed, and how many of them were candidates'
    own (the rest is padding), summed over the passes of one or more decodings."""

    computed: int = 0
    content: int = 0

    @property
    def padded_share(self) -> float:
        return 1.0 - self.content / self.computed if self.computed else 0.0


def width_groups(lengths: Sequence[int], overhead: int) -> list[tuple[int, int]]:
    """Rows with ascending `lengths` -> contiguous groups (start, end), each decoded as one
    pass at the width of its last row, that minimise the row-positions computed plus
    `overhead` per group (what one more pass costs). Exact, by dynamic programming over the
    distinct lengths (a group never splits rows of one length)."""
    if not lengths:
        return []
    values: list[int] = []
    ends: list[int] = []  # ends[i]: one past the last row of length values[i]
    for row, length in enumerate(lengths):
        if values and length == values[-1]:
            ends[-1] = row + 1
        else:
            values.append(length)
            ends.append(row + 1)
    best = [0] + [0] * len(values)  # best[m]: cost of the rows of the first m lengths
    cut = [0] * (len(values) + 1)
    for m in range(1, len(values) + 1):
        choices = (
            (best[k] + overhead + (ends[m - 1] - (ends[k - 1] if k else 0)) * values[m - 1], k)
            for k in range(m)
        )
        best[m], cut[m] = min(choices)
    groups: list[tuple[int, int]] = []
    m = len(values)
    while m:
        k = cut[m]
        groups.append((ends[k - 1] if k else 0, ends[m - 1]))
        m = k
    return groups[::-1]


def initial_hypotheses(
    lengths: Tensor,
    config: ModelConfig,
    keys: Tensor,
    mode: Literal["random", "mask"] | None,
    width: int | None = None,
) -> Tensor:
    """Candidate lengths (B, K) -> initial hypotheses (B * K, W), W the longest length (or
    `width`, at least that): row b * K + k holds lengths[b, k] - 1 tokens, EOS, padding.

    The tokens are [MASK] (`mode` "mask"), or (`mode` "random"; None: the config's
    ``init_hypothesis``) candidate k's keyed draw for sentence b (`keys` (B,), see
    :mod:`gmlm.decoding.draws`), which depends on the key, k and the position only.
    """
    mode = config.init_hypothesis if mode is None else mode
    flat = lengths.flatten()
    width = int(lengths.max()) if width is None else width
    if mode == "random":
        hyp = keyed_tokens(keys, lengths.shape[1], width, config)
    else:
        hyp = torch.full((flat.shape[0], width), config.mask_id, device=lengths.device)
    positions = torch.arange(width, device=lengths.device)
    last = (flat - 1).unsqueeze(1)
    hyp = hyp.masked_fill(positions == last, config.eos_id)
    return hyp.masked_fill(positions > last, config.pad_id)


def candidate_lengths(lengths: Tensor, options: RefinementOptions, config: ModelConfig) -> Tensor:
    """Predicted lengths (B, L) -> candidate lengths (B, L * (1 + len(length_offsets)) *
    random_starts): for each length its offsets (0 first), each repeated random_starts times;
    clamped to 1 .. max_target_len."""
    offsets = torch.tensor((0, *options.length_offsets), device=lengths.device)
    shifted = (lengths.unsqueeze(2) + offsets).flatten(1)
    return shifted.repeat_interleave(options.random_starts, dim=1).clamp(1, config.max_target_len)


def refinement_bytes(config: ModelConfig, rows: int, width: int, src_len: int) -> int:
    """Bytes a decoder pass over `rows` candidates of up to `width` tokens keeps alive, for
    sources of `src_len` tokens, a lower bound of its peak: three float32 (rows, width, V)
    tensors (logits, log-probabilities, their maximum), the hidden states and feed-forward
    activations of a layer, the attention weights of self-, positional and cross-attention,
    and every layer's cross-attention keys and values of the source."""
    per_row = (
        3 * width * config.vocab_size
        + width * (4 * config.d_model + config.d_ff)
        + config.n_heads * width * (3 * width + src_len)
        + 2 * config.n_decoder_layers * src_len * config.d_model
    )
    return 4 * rows * per_row


def check_refinement_memory(config: ModelConfig, lengths: Tensor, src: Tensor) -> None:
    """A :class:`gmlm.memory.MemoryLimitError` before decoding the candidate lengths (B, K)
    of src (B, S) if the estimated memory (:func:`refinement_bytes`) exceeds what the device
    has free; K = length_beam * (1 + len(length_offsets)) * random_starts."""
    batch, per_sentence = lengths.shape
    rows, width = batch * per_sentence, int(lengths.max()) if lengths.numel() else 0
    check_memory(
        refinement_bytes(config, rows, width, src.shape[1]),
        f"PaDIR decoding of {batch} sentence(s) with {per_sentence} candidates each (length_beam "
        f"x (1 + length_offsets) x random_starts) of up to {width} tokens = {rows:,} rows "
        f"(vocabulary {config.vocab_size})",
        "lower --length-beam, --random-starts or the batch (--max-tokens, --batch-size)",
        device=str(src.device),
    )


@torch.no_grad()
def plan_candidates(
    model: PadirModel,
    src: Tensor,
    options: RefinementOptions,
    lengths: Tensor | None,
    encoded: PadirEncoderOutput | None,
    device: torch.device,
) -> tuple[PadirEncoderOutput, Tensor]:
    """`options` validated against the model, src (B, S) encoded (unless `encoded` is given),
    its top lengths predicted (unless `lengths` are given), and the (B, K) candidate lengths
    on `device`, their decoding's memory checked: what both decoders start from."""
    options.validate(model.config)
    enc = model.encode(src) if encoded is None else encoded
    if lengths is None:
        lengths = model.predict_lengths(enc, options.length_beam) + options.length_shift
    lengths = lengths.cpu() if device.type == "cpu" else lengths.to(device)  # a host copy
    per_sentence = candidate_lengths(lengths, options, model.config)
    check_refinement_memory(model.config, per_sentence, src)
    return enc, per_sentence


def length_scores(
    model: PadirModel,
    enc: PadirEncoderOutput,
    sentence: Tensor,
    flat: Tensor,
    options: RefinementOptions,
) -> Tensor:
    """(N,) the length predictor's log-probability of each candidate's length `flat` (N,)
    given its sentence's encoding (row `sentence` (N,) of `enc`); zeros, the softmax
    skipped, where the selection does not use it (length_score_weight 0)."""
    if not options.length_score_weight:
        return torch.zeros(flat.shape, device=flat.device)
    log_probs = model.length_logits(enc).float().log_softmax(-1)
    return log_probs[sentence, flat - 1]  # candidate lengths are 1 .. max_target_len


def refinement_init(
    model: PadirModel,
    src: Tensor,
    options: RefinementOptions,
    seed: int = 0,
    lengths: Tensor | None = None,
    encoded: PadirEncoderOutput | None = None,
) -> RefinementState:
    """Encode src (B, S) once and set up the candidates.

    encoded: src's encoding, made already (e.g. by the pass that predicted `lengths` to
    plan the batches; :class:`gmlm.translation.Translator`), used instead of encoding again.

    lengths: (B, L) target lengths (EOS counted) to decode instead of the predicted top
    ``length_beam``, e.g. the reference lengths for an oracle-length experiment.
    seed: keys the initial random tokens with each sentence's own ids (see the module
    docstring and :mod:`gmlm.decoding.draws`).
    """
    config = model.config
    enc, per_sentence = plan_candidates(model, src, options, lengths, encoded, src.device)
    k = per_sentence.shape[1]
    flat = per_sentence.flatten()
    sentence = torch.arange(src.shape[0], device=src.device).repeat_interleave(k)
    length_log_probs = length_scores(model, enc, sentence, flat, options)
    # The active rows are kept in ascending order of length, so that a pass can run groups of
    # similar length (width_groups) over contiguous slices of the rows and their memory.
    order = flat.argsort(stable=True)
    memory = model.cross_memory(enc).select(sentence[order])
    keys = sentence_keys(src, config.pad_id, seed)
    initial = initial_hypotheses(per_sentence, config, keys, options.init)
    count = flat.numel()
    attention_shape = (count, config.n_heads, initial.shape[1])
    return RefinementState(
        step=0,
        candidates=k,
        rows=order,
        memory=memory,
        inputs=initial[order],
        lengths=flat,
        source_lengths=(src != config.pad_id).sum(1)[sentence],
        length_log_probs=length_log_probs,
        initial=initial,
        tokens=initial,
        token_log_probs=torch.zeros(initial.shape, device=src.device),
        passes=torch.zeros(count, dtype=torch.long, device=src.device),
        pruned=torch.zeros(count, dtype=torch.bool, device=src.device),
        history=(),
        self_attention=(
            torch.zeros((*attention_shape, initial.shape[1]), device=src.device)
            if options.return_attention
            else None
        ),
        cross_attention=(
            torch.zeros((*attention_shape, src.shape[1]), device=src.device)
            if options.return_attention
            else None
        ),
        positions={},
    )


def remask_counts(content_lengths: Tensor, step: int, options: RefinementOptions) -> Tensor:
    """(N,) how many positions to reset after pass `step` (1-based) of options.steps."""
    if options.remask == "constant":
        share = options.remask_ratio
    elif options.remask == "linear":
        share = (options.steps - step) / options.steps
    else:
        share = 0.0
    return (content_lengths * share).floor().long()


def least_confident(log_probs: Tensor, content: Tensor, counts: Tensor) -> Tensor:
    """(N, W) True at the counts[n] content positions of row n with the lowest log_probs."""
    confidence = log_probs.masked_fill(~content, math.inf)
    ranks = confidence.argsort(dim=1).argsort(dim=1)
    return content & (ranks < counts.unsqueeze(1))


def repeated_ngram_positions(tokens: Tensor, content: Tensor, longest: int) -> Tensor:
    """(N, W) True at the second copy of every immediately repeated n-gram of content tokens,
    n = 1 .. `longest`: at i+n .. i+2n-1 wherever tokens[i:i+n] == tokens[i+n:i+2n], all 2n of
    them content (`content` (N, W) marks a prefix of each row). n = 1: a token equal to its
    left neighbour (the paper's stutter)."""
    found = torch.zeros_like(content)
    width = tokens.shape[1]
    for n in range(1, min(longest, width // 2) + 1):
        # same[:, k]: token k equals token k + n; an n-gram repeats at i if it does for i..i+n-1
        same = (tokens[:, :-n] == tokens[:, n:]) & content[:, n:]
        starts = same.unfold(1, n, 1).all(2)  # (N, W - 2n + 1)
        for j in range(n):
            found[:, n + j : n + j + starts.shape[1]] |= starts
    return found


def drop_repeats(tokens: Tensor, longest: int) -> Tensor:
    """(L,) `tokens` without the second copy of every immediately repeated n-gram, n = 1 ..
    `longest`, again until none is left (a drop can bring two copies of another together)."""
    while True:
        every = torch.ones_like(tokens, dtype=torch.bool)
        repeated = repeated_ngram_positions(tokens[None], every[None], longest)[0]
        if not repeated.any():
            return tokens
        tokens = tokens[~repeated]


def next_input(
    predicted: Tensor,
    log_probs: Tensor,
    previous: Tensor,
    initial: Tensor,
    content: Tensor,
    step: int,
    options: RefinementOptions,
) -> Tensor:
    """The decoder input after a non-final pass (all (N, W)): the argmax `predicted` (with
    `log_probs`), stutter-remasked from `previous` (this pass's input) or `initial` (the
    second copy of a repeated n-gram of up to `stutter_ngram` tokens), then the least
    confident positions reset to `initial`."""
    nxt = predicted
    if options.stutter_remask != "none":
        source = previous if options.stutter_remask == "previous" else initial
        repeats = repeated_ngram_positions(predicted, content, options.stutter_ngram)
        nxt = torch.where(repeats, source, nxt)
    if options.remask != "none":
        counts = remask_counts(content.sum(1), step, options)
        nxt = torch.where(least_confident(log_probs, content, counts), initial, nxt)
    return nxt


def log_probs_of(logits: Tensor, tokens: Tensor) -> Tensor:
    """(N, W) float32 log-probabilities of `tokens` (N, W) under `logits` (N, W, V).

    One fused ``log_softmax`` (accumulating in float32 whatever the logits' dtype), then a
    gather, rather than ``logits.float()`` and ``logsumexp``: torch's logsumexp is composite
    (max, subtract, exp, sum, log, add, each a pass over the (N, W, V) logits), about twice
    the time on a CPU (docs/DESIGN.md section 7). Equal to it up to float32 rounding."""
    log_probs = torch.log_softmax(logits, -1, dtype=torch.float32)
    return log_probs.gather(2, tokens.unsqueeze(2)).squeeze(2)


def _put(buffer: Tensor, rows: Tensor, values: Tensor) -> Tensor:
    """A copy of `buffer` with rows `rows` overwritten by `values`, which may be narrower
    than `buffer` in every dimension after the first (the rest of those rows stays)."""
    out = buffer.clone()
    index: tuple[Tensor | slice, ...] = (rows, *(slice(0, size) for size in values.shape[1:]))
    out[index] = values.to(out.dtype)
    return out


@torch.no_grad()
def refinement_step(
    model: PadirModel, state: RefinementState, options: RefinementOptions
) -> RefinementState:
    """One decoder pass over the active candidates; retire those that are done."""
    config = model.config
    rows = state.rows
    lengths = state.lengths[rows]
    width = int(lengths.max())
    hyp = state.inputs[:, :width]
    positions = torch.arange(width, device=hyp.device)
    padding = positions >= lengths.unsqueeze(1)
    is_eos = positions == (lengths - 1).unsqueeze(1)
    content = ~padding & ~is_eos
    # One pass over groups of similar length (the rows are in ascending order of length),
    # or over all rows at once where splitting saves less than it costs (or attention is
    # returned, which is kept at the full width).
    overhead = options.split_overhead if not options.return_attention else 1 << 62
    groups = width_groups(lengths.tolist(), overhead)
    known_positions = dict(state.positions)
    predicted = torch.full_like(hyp, config.pad_id)
    chosen = torch.zeros(hyp.shape, device=hyp.device)
    computed = 0
    out = None
    for start, end in groups:
        own = int(lengths[end - 1])
        known = known_positions.get(own)
        known = model.positions(own, project=True) if known is None else known
        known_positions[own] = known
        part = slice(start, end)
        memory = state.memory if len(groups) == 1 else state.memory.narrow(start, end - start)
        out = model.decode(
            memory,
            hyp[part, :own],
            padding_mask=padding[part, :own],
            return_attention=options.return_attention,
            positions=known,
        )
        # The best ordinary token (special ids are never output) and its log-probability,
        # from the model's logits as they are (bf16 under bf16: the same argmax as in fp32).
        best = ordinary_argmax(out.logits, content[part, :own], is_eos[part, :own], config)
        predicted[part, :own] = best.to(hyp.dtype)
        chosen[part, :own] = log_probs_of(out.logits, best).masked_fill(padding[part, :own], 0.0)
        computed += (end - start) * own
    assert out is not None

    step = state.step + 1
    final = step >= options.steps
    if final:
        nxt = predicted
        done = torch.ones_like(lengths, dtype=torch.bool)
    else:
        initial = state.initial[rows, :width]
        nxt = next_input(predicted, chosen, hyp, initial, content, step, options)
        stoppable = options.early_stop and options.remask != "linear"
        done = (nxt == hyp).all(1) & stoppable

    tokens = _put(state.tokens, rows, predicted)
    # Padding queries get zero weights, so a buffer row does not depend on the batch width.
    query_padding = padding[:, None, :, None]
    self_attention, cross_attention = state.self_attention, state.cross_attention
    if self_attention is not None and out.self_attention is not None:
        weights = out.self_attention.masked_fill(query_padding, 0.0)
        self_attention = _put(self_attention, rows, weights)
    if cross_attention is not None and out.cross_attention is not None:
        weights = out.cross_attention.masked_fill(query_padding, 0.0)
        cross_attention = _put(cross_attention, rows, weights)
    token_log_probs = _put(state.token_log_probs, rows, chosen)
    pruned = state.pruned
    survivors = pruning_keep(step, options)
    if survivors is not None and not final and survivors < state.candidates:
        scores = candidate_scores(tokens, token_log_probs, state, options)
        pruned = pruned | prune_losers(scores, tokens, pruned, state.candidates, survivors)
        done = done | pruned[rows]
    keep = (~done).nonzero().squeeze(1)
    memory = state.memory if keep.numel() == rows.numel() else state.memory.select(keep)
    return RefinementState(
        step=step,
        candidates=state.candidates,
        rows=rows[keep],
        memory=memory,
        inputs=nxt[keep],
        lengths=state.lengths,
        source_lengths=state.source_lengths,
        length_log_probs=state.length_log_probs,
        initial=state.initial,
        tokens=tokens,
        token_log_probs=token_log_probs,
        passes=state.passes.index_add(0, rows, torch.ones_like(rows)),
        pruned=pruned,
        history=(*state.history, tokens) if options.return_steps else (),
        self_attention=self_attention,
        cross_attention=cross_attention,
        positions=known_positions,
        computed=state.computed + computed,
        content=state.content + int(lengths.sum()),
    )


def pruning_keep(step: int, options: RefinementOptions) -> int | None:
    """How many candidates per sentence pruning keeps after pass `step` (1-based): the
    prune_keep entry of that pass (the first at pass prune_after), or None (no pruning)."""
    stage = step - options.prune_after
    if options.prune_after == 0 or not 0 <= stage < len(options.prune_keep):
        return None
    return options.prune_keep[stage]


def prune_losers(scores: Tensor, tokens: Tensor, pruned: Tensor, k: int, keep: int) -> Tensor:
    """(C,) True at the candidates that pruning drops: all but each sentence's `keep` best
    by `scores` (C,), among those not `pruned` (C,) already, where identical hypotheses
    (tokens (C, W)) are one candidate at their lowest index and equal scores go to the lower
    index, as in the final choice. Depends on the sentence's own candidates only."""
    first = first_identical(tokens, k, ~pruned)
    index = torch.arange(k, device=tokens.device)
    ranked = scores.view(-1, k).masked_fill((first != index) | pruned.view(-1, k), -math.inf)
    order = ranked.sort(dim=1, descending=True, stable=True).indices
    losers = torch.zeros_like(ranked, dtype=torch.bool).scatter_(1, order[:, keep:], True)
    return losers.flatten() & ~pruned


def output_mask(
    tokens: Tensor, initial: Tensor, lengths: Tensor, options: RefinementOptions
) -> Tensor:
    """(C, W) True at the content positions of tokens (C, W) that survive post-processing:
    not still equal to their initial token, and not equal to the previous surviving token."""
    positions = torch.arange(tokens.shape[1], device=tokens.device)
    keep = positions < (lengths - 1).unsqueeze(1)
    if not options.keep_initial_tokens:
        keep = keep & (tokens != initial)
    if options.dedup:
        # Index of the nearest kept position to the left (-1: none). Comparing with it is
        # enough: a dropped repeat equals the kept token it repeats.
        kept_at = torch.where(keep, positions, -1)
        previous = torch.cummax(kept_at, dim=1).values.roll(1, dims=1)
        previous[:, 0] = -1
        left = tokens.gather(1, previous.clamp(min=0))
        keep = keep & ~((previous >= 0) & (tokens == left))
    return keep


def first_identical(tokens: Tensor, k: int, eligible: Tensor | None = None) -> Tensor:
    """(B, K) for candidates with tokens (C, W), K per sentence: the lowest index of its
    sentence whose tokens equal its own (itself if none), among the `eligible` (C,) ones
    (default: all; an ineligible candidate is its own)."""
    hyp = tokens.view(-1, k, tokens.shape[1])
    same = (hyp.unsqueeze(2) == hyp.unsqueeze(1)).all(3)  # (B, K, K): i's tokens == j's
    if eligible is not None:
        both = eligible.view(-1, k)
        same = same & both.unsqueeze(2) & both.unsqueeze(1)
    index = torch.arange(k, device=tokens.device)
    return torch.where(same, index, k).min(2).values.minimum(index)


def merge_identical(
    scores: Tensor, tokens: Tensor, k: int, eligible: Tensor | None = None
) -> Tensor:
    """(C,) scores of candidates with final argmax tokens (C, W), K per sentence -> (B, K):
    a candidate whose tokens equal those of a lower-index candidate of its sentence (so also
    its length) takes that candidate's score; with `eligible` (C,), only eligible candidates
    merge.

    Identical hypotheses are one candidate, kept at its lowest index: their scores can differ
    by float noise alone (e.g. by a row's place in the batch), which must not decide which of
    them (and so which initial tokens and trajectory) is returned.
    """
    return scores.view(-1, k).gather(1, first_identical(tokens, k, eligible))


class Scoring(Protocol):
    """What the selection score reads of a state besides the tokens: (C,) lengths, (C, W)
    initial hypotheses, (C,) length log-probabilities (a :class:`RefinementState` is one)."""

    @property
    def lengths(self) -> Tensor: ...
    @property
    def initial(self) -> Tensor: ...
    @property
    def length_log_probs(self) -> Tensor: ...


def candidate_scores(
    tokens: Tensor, token_log_probs: Tensor, state: Scoring, options: RefinementOptions
) -> Tensor:
    """(C,) the selection score of candidates with last argmax `tokens` (C, W) and their
    log-probabilities (C, W) (0 at padding): the token part by ``selection``, divided by the
    length penalty, plus ``length_score_weight`` times the length log-probability."""
    lengths = state.lengths
    if options.selection == "mean":
        scores = token_log_probs.sum(1) / lengths
    elif options.selection == "changed":
        positions = torch.arange(token_log_probs.shape[1], device=token_log_probs.device)
        content = positions < (lengths - 1).unsqueeze(1)
        changed = content & (tokens != state.initial)
        scores = (token_log_probs * changed).sum(1)
    else:
        scores = token_log_probs.sum(1)
    scores = scores / length_penalty(lengths, options.length_penalty)
    if options.length_score_weight:
        scores = scores + options.length_score_weight * state.length_log_probs
    return scores


class Candidates(Scoring, Protocol):
    """What the final choice reads of the candidates, K per sentence: the :class:`Scoring`
    fields and (C, W) tokens and token_log_probs, (C,) passes and pruned, the history of
    tokens after each pass (return_steps) and K (a :class:`RefinementState` is one)."""

    @property
    def candidates(self) -> int: ...
    @property
    def tokens(self) -> Tensor: ...
    @property
    def token_log_probs(self) -> Tensor: ...
    @property
    def passes(self) -> Tensor: ...
    @property
    def pruned(self) -> Tensor: ...
    @property
    def history(self) -> Sequence[Tensor]: ...


@dataclass(frozen=True)
class Selection:
    """Each of B sentences' chosen candidate, as tensors: chosen (B,) its row among the C
    candidates and picked (B,) its index 0 .. K-1 in its sentence; candidate_scores (B, K)
    (see :class:`Refined`); its score, log_prob, length, passes (B,) each; tokens (B, W), its
    last argmax; keep (B, W), the positions post-processing keeps (:func:`output_mask`); and
    with return_steps steps (T + 1, B, W), its initial hypothesis then its tokens after each
    pass. :func:`select` makes it with no host read, so a CUDA graph can hold the choice
    (gmlm.decoding.fixed); :meth:`to_host` brings it back in two copies."""

    chosen: Tensor
    picked: Tensor
    candidate_scores: Tensor
    score: Tensor
    log_prob: Tensor
    length: Tensor
    passes: Tensor
    tokens: Tensor
    keep: Tensor
    steps: Tensor | None

    def first(self, count: int) -> Selection:
        """The first `count` sentences' (a batch padded with copies drops the copies)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        cut = {name: value[:count] for name, value in fields.items() if name != "steps"}
        steps = None if self.steps is None else self.steps[:, :count]
        return Selection(**cut, steps=steps)

    def to_host(self) -> Selection:
        """On the CPU, in two copies (integers, floats): what the host reads of a decode (the
        same two calls on a CPU, where they copy nothing)."""
        count, width = self.tokens.shape
        integers = [self.chosen, self.picked, self.length, self.passes, self.tokens.flatten()]
        integers.append(self.keep.long().flatten())
        if self.steps is not None:
            integers.append(self.steps.flatten())
        ints = torch.cat(integers).cpu()
        floats = torch.cat(
            [self.candidate_scores.flatten().float(), self.score.float(), self.log_prob.float()]
        ).cpu()
        grid = count * width
        chosen, picked, length, passes, tokens, keep, steps = ints.split(
            [count] * 4 + [grid, grid, ints.numel() - 4 * count - 2 * grid]
        )
        scores, score, log_prob = floats.split([self.candidate_scores.numel(), count, count])
        return Selection(
            chosen,
            picked,
            scores.view(self.candidate_scores.shape),
            score,
            log_prob,
            length,
            passes,
            tokens.view(count, width),
            keep.view(count, width).bool(),
            None if self.steps is None else steps.view(self.steps.shape),
        )


@torch.no_grad()
def select(state: Candidates, options: RefinementOptions, extra: Tensor | None = None) -> Selection:
    """Score every candidate and choose each sentence's best (call once no candidate is
    active): the highest score among its candidates that pruning kept, identical hypotheses
    being one candidate at their lowest index (:func:`merge_identical`), equal scores going to
    the lower index. `extra` (C,), when given, is added to every candidate's score (another
    model's, :mod:`gmlm.decoding.rescoring`). Tensor operations only: no host read."""
    tokens, k = state.tokens, state.candidates
    scores = candidate_scores(tokens, state.token_log_probs, state, options)
    if extra is not None:
        scores = scores + extra
    per_sentence = merge_identical(scores, tokens, k, ~state.pruned)
    per_sentence = per_sentence.masked_fill(state.pruned.view_as(per_sentence), -math.inf)
    picked = per_sentence.argmax(1)  # the first of equal maxima: the lowest index
    chosen = torch.arange(per_sentence.shape[0], device=picked.device) * k + picked
    steps = None
    if options.return_steps:
        history = (state.initial, *state.history)
        history += (tokens,) * (options.steps + 1 - len(history))
        steps = torch.stack(history).index_select(1, chosen)
    chosen_tokens, length = tokens.index_select(0, chosen), state.lengths.index_select(0, chosen)
    initial = state.initial.index_select(0, chosen)
    return Selection(
        chosen=chosen,
        picked=picked,
        candidate_scores=per_sentence,
        score=scores.index_select(0, chosen),
        log_prob=state.token_log_probs.sum(1).index_select(0, chosen),
        length=length,
        passes=state.passes.index_select(0, chosen),
        tokens=chosen_tokens,
        keep=output_mask(chosen_tokens, initial, length, options),
        steps=steps,
    )


def selection_results(
    selection: Selection,
    options: RefinementOptions,
    attention: tuple[Tensor | None, Tensor | None] = (None, None),
    source_lengths: Tensor | None = None,
) -> list[Refined]:
    """The :class:`Refined` of each sentence of a `selection` on the host: its kept tokens,
    without repeated n-grams (``stutter_ngram`` > 1), and with `attention` (the candidates'
    last-layer self- and cross-attention) cut to its length and its source's
    (`source_lengths` (C,))."""
    results = []
    for sentence, row in enumerate(selection.chosen.tolist()):
        n = int(selection.length[sentence])
        raw = selection.tokens[sentence, : n - 1]
        tokens = raw[selection.keep[sentence, : n - 1]]
        if options.dedup and options.stutter_ngram > 1:  # (1: output_mask did it)
            tokens = drop_repeats(tokens, options.stutter_ngram)
        self_attention, cross_attention = attention
        if cross_attention is not None:
            assert source_lengths is not None
            cross_attention = cross_attention[row, :, :n, : int(source_lengths[row])]
        steps = selection.steps
        results.append(
            Refined(
                tokens=tokens.tolist(),
                score=float(selection.score[sentence]),
                log_prob=float(selection.log_prob[sentence]),
                candidate=int(selection.picked[sentence]),
                length=n,
                passes=int(selection.passes[sentence]),
                candidate_scores=selection.candidate_scores[sentence].tolist(),
                raw=raw.tolist(),
                steps=[] if steps is None else [h[sentence, : n - 1].tolist() for h in steps],
                self_attention=None if self_attention is None else self_attention[row, :, :n, :n],
                cross_attention=cross_attention,
            )
        )
    return results


# What a rescoring model adds to each candidate's score, from the finished state: (C,)
# (gmlm.decoding.rescoring.rescorer).
Rescore = Callable[["RefinementState"], Tensor]


def refinement_finish(
    state: RefinementState, options: RefinementOptions, rescore: Rescore | None = None
) -> list[Refined]:
    """Score every candidate, keep each sentence's best and post-process it (call once no
    candidate is active): :func:`select`, its scores plus what `rescore` gives each
    candidate (:func:`gmlm.decoding.rescoring.rescorer`), then :func:`selection_results` on
    the host."""
    extra = None if rescore is None else rescore(state)
    return selection_results(
        select(state, options, extra).to_host(),
        options,
        (state.self_attention, state.cross_attention),
        state.source_lengths,
    )


def refine(
    model: PadirModel,
    src: Tensor,
    options: RefinementOptions | None = None,
    seed: int = 0,
    lengths: Tensor | None = None,
    stats: PaddingStats | None = None,
    encoded: PadirEncoderOutput | None = None,
    rescore: Rescore | None = None,
) -> list[Refined]:
    """PaDIR decoding of src (B, S): one result per sentence (see :func:`refinement_init`);
    `stats`, when given, adds the row-positions the passes computed and their content;
    `rescore`, when given, adds its scores to the candidates' before the final choice
    (:func:`refinement_finish`)."""
    options = options or RefinementOptions()
    state = refinement_init(model, src, options, seed, lengths, encoded)
    while state.rows.numel():
        checkpoint()  # stops here when nobody waits any more (gmlm.decoding.cancel)
        state = refinement_step(model, state, options)
    if stats is not None:
        stats.computed += state.computed
        stats.content += state.content
    return refinement_finish(state, options, rescore)
