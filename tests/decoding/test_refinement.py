"""PaDIR refinement: one pass = one forward argmax, exact early stopping, rows leaving the
batch, stutter remasking and the post-processing filters, candidate selection."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import random

import pytest
import torch

from gmlm.decoding.draws import (
    CANDIDATE,
    MASK,
    POSITION,
    keyed_tokens,
    mix,
    seed_word,
    sentence_keys,
)
from gmlm.decoding.options import MAX_STEPS, MAX_STUTTER_NGRAM, RefinementOptions
from gmlm.decoding.refinement import (
    PaddingStats,
    RefinementState,
    candidate_lengths,
    candidate_scores,
    drop_repeats,
    first_identical,
    least_confident,
    log_probs_of,
    output_mask,
    refine,
    refinement_bytes,
    refinement_finish,
    refinement_init,
    refinement_step,
    remask_counts,
    repeated_ngram_positions,
    width_groups,
)
from gmlm.decoding.scores import length_penalty
from gmlm.errors import GmlmError
from gmlm.memory import MemoryLimitError
from gmlm.models import PadirModel
from gmlm.models.padir import stutter_positions
from gmlm.nn import preset
from gmlm.nn.layers import DecoderOutput
from tests.helpers.reversal import CONFIG, EOS, PAD

PLAIN = RefinementOptions(
    stutter_remask="none",
    keep_initial_tokens=True,
    dedup=False,
    early_stop=False,
    selection="sum",
    prune_after=0,
)


def run(model: PadirModel, src: torch.Tensor, options: RefinementOptions, **kw) -> RefinementState:  # type: ignore[no-untyped-def]
    state = refinement_init(model, src, options, 0, **kw)
    while state.rows.numel():
        state = refinement_step(model, state, options)
    return state


@pytest.fixture
def untrained_padir() -> PadirModel:
    torch.manual_seed(2)
    return PadirModel(CONFIG).eval()


@pytest.mark.parametrize("model_name", ["trained_padir", "untrained_padir"])
def test_one_pass_is_one_forward_argmax(
    model_name: str, request: pytest.FixtureRequest, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    model = request.getfixturevalue(model_name)
    src = reversal[0][:5]
    options = dataclasses.replace(PLAIN, steps=1, length_beam=3)
    state = run(model, src, options)
    with torch.no_grad():
        enc = model.encode(src)
        rows = torch.arange(5).repeat_interleave(3)
        log_probs = model.decode(enc.select(rows), state.initial).logits.log_softmax(-1)
    content = (state.initial != PAD) & (state.initial != EOS)
    expected = log_probs[..., CONFIG.n_special :].argmax(-1) + CONFIG.n_special
    expected = torch.where(content, expected, state.initial)
    assert torch.equal(state.tokens, expected)
    chosen = log_probs.gather(2, expected.unsqueeze(2)).squeeze(2) * (expected != PAD)
    torch.testing.assert_close(state.token_log_probs, chosen)
    # Selection: the best summed log-probability of each sentence's candidates.
    results = refinement_finish(state, options)
    sums = chosen.sum(1).view(5, 3)
    for sentence, result in enumerate(results):
        assert result.candidate == int(sums[sentence].argmax())
        assert result.candidate_scores == pytest.approx(sums[sentence].tolist(), abs=1e-5)
        assert result.score == pytest.approx(float(sums[sentence].max()), abs=1e-5)
        row = sentence * 3 + result.candidate
        assert result.tokens == expected[row, : result.length - 1].tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_token_log_probs_are_the_float32_log_softmax_of_the_logits(dtype: torch.dtype) -> None:
    """The fused scoring (one log_softmax in float32) against the plain definition, on
    logits of the model's dtype: the logits as float32, minus their logsumexp."""
    torch.manual_seed(0)
    logits = (torch.randn(3, 7, 50) * 4).to(dtype)
    tokens = torch.randint(0, 50, (3, 7))
    got = log_probs_of(logits, tokens)
    full = logits.float()
    expected = full.gather(2, tokens.unsqueeze(2)).squeeze(2) - full.logsumexp(-1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_length_penalty_changes_the_selection_score(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:4]
    options = dataclasses.replace(PLAIN, steps=2, length_penalty=1.0)
    state = run(trained_padir, src, options)
    results = refinement_finish(state, options)
    penalised = state.token_log_probs.sum(1) / length_penalty(state.lengths, 1.0)
    for sentence, result in enumerate(results):
        best = penalised.view(4, -1)[sentence]
        assert result.candidate == int(best.argmax())
        assert result.score == pytest.approx(float(best.max()), abs=1e-5)


def test_length_weight_adds_the_length_log_probability(
    untrained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:4]
    options = dataclasses.replace(PLAIN, steps=2, length_beam=3, length_score_weight=0.5)
    state = run(untrained_padir, src, options)
    results = refinement_finish(state, options)
    with torch.no_grad():
        length_lp = untrained_padir.length_logits(untrained_padir.encode(src)).log_softmax(-1)
    expected_length = length_lp.gather(1, state.lengths.view(4, 3) - 1)
    scores = state.token_log_probs.sum(1).view(4, 3) + 0.5 * expected_length
    for sentence, result in enumerate(results):
        assert result.candidate == int(scores[sentence].argmax())
        assert result.score == pytest.approx(float(scores[sentence].max()), abs=1e-5)
    # A dominant weight keeps the top predicted length, i.e. B = 1's candidate.
    heavy = dataclasses.replace(options, length_score_weight=1e6)
    assert all(r.candidate == 0 for r in refinement_finish(run(untrained_padir, src, heavy), heavy))


@pytest.mark.parametrize("selection", ["sum", "mean", "changed"])
def test_selection_rules_score_candidates_as_documented(
    selection: str, untrained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:4]
    options = dataclasses.replace(PLAIN, steps=2, length_beam=4, selection=selection)
    state = run(untrained_padir, src, options)
    results = refinement_finish(state, options)
    # A plain loop over each candidate's positions, from the state's own tensors.
    expected = []
    for c in range(state.lengths.numel()):
        n = int(state.lengths[c])
        lp = [float(x) for x in state.token_log_probs[c, :n]]
        if selection == "sum":
            expected.append(sum(lp))
        elif selection == "mean":
            expected.append(sum(lp) / n)
        else:  # content positions (EOS excluded) whose token moved off its initial one
            tokens, initial = state.tokens[c].tolist(), state.initial[c].tolist()
            expected.append(sum(lp[i] for i in range(n - 1) if tokens[i] != initial[i]))
    scores = torch.tensor(expected).view(4, 4)
    for sentence, result in enumerate(results):
        assert result.candidate == int(scores[sentence].argmax())
        assert result.score == pytest.approx(float(scores[sentence].max()), abs=1e-4)
    with pytest.raises(GmlmError, match="selection='best'"):
        dataclasses.replace(options, selection="best").validate(CONFIG)  # type: ignore[arg-type]


def test_mean_selection_does_not_favour_the_shortest_candidate(
    untrained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The summed log-probability of a longer candidate has more (negative) terms: with equal
    per-token confidence "sum" picks the shortest length, "mean" does not care."""
    src = reversal[0][:4]
    options = dataclasses.replace(PLAIN, steps=2, length_beam=4)
    state = run(untrained_padir, src, options)
    per_token = torch.where(state.token_log_probs != 0, -0.5, 0.0)  # same confidence everywhere
    flat = dataclasses.replace(state, token_log_probs=per_token)
    lengths = state.lengths.view(4, 4)
    for sentence, r in enumerate(refinement_finish(flat, options)):
        assert r.length == int(lengths[sentence].min())
    mean = dataclasses.replace(options, selection="mean")
    for r in refinement_finish(flat, mean):
        assert r.candidate == 0  # all tie at -0.5: the lowest index, the top predicted length


@pytest.mark.parametrize("remask", ["none", "constant"])
@pytest.mark.parametrize("stutter", ["previous", "initial"])
def test_early_stop_changes_nothing_but_the_cost(
    remask: str,
    stutter: str,
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = reversal[0]
    base = RefinementOptions(
        steps=6,
        length_beam=3,
        random_starts=2,
        stutter_remask=stutter,  # type: ignore[arg-type]
        remask=remask,  # type: ignore[arg-type]
        remask_ratio=0.3,
        prune_after=0,  # every candidate runs until it stops
        return_steps=True,
        return_attention=True,
    )
    rows = record_decode_rows(trained_padir, monkeypatch)
    stopped = run(trained_padir, src, base)
    full = run(trained_padir, src, dataclasses.replace(base, early_stop=False))
    assert torch.equal(stopped.tokens, full.tokens)
    torch.testing.assert_close(stopped.token_log_probs, full.token_log_probs)
    assert stopped.self_attention is not None and full.self_attention is not None
    torch.testing.assert_close(stopped.self_attention, full.self_attention)
    torch.testing.assert_close(stopped.cross_attention, full.cross_attention)
    assert (full.passes == 6).all()
    passes = stopped.passes.tolist()
    assert min(passes) < max(passes)  # candidates stopped, and at different passes
    # Stopped candidates leave the batch: each pass runs exactly the candidates still going.
    candidates = stopped.passes.numel()
    early_calls = rows[: max(passes)]
    assert early_calls == [sum(p > t for p in passes) for t in range(max(passes))]
    assert rows[max(passes) :] == [candidates] * 6
    for a, b in zip(refinement_finish(stopped, base), refinement_finish(full, base), strict=True):
        assert (a.tokens, a.raw, a.steps, a.candidate) == (b.tokens, b.raw, b.steps, b.candidate)
        assert a.score == pytest.approx(b.score, abs=1e-5)
        assert len(a.steps) == 7


def record_decode_rows(model: PadirModel, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch model.decode (on this instance, for this test) to log each call's rows."""
    calls: list[int] = []
    original = model.decode

    def logged(memory, hyp, **kw):  # type: ignore[no-untyped-def]
        calls.append(hyp.shape[0])
        return original(memory, hyp, **kw)

    monkeypatch.setattr(model, "decode", logged)
    return calls


def fixed_predictions(
    model: PadirModel, monkeypatch: pytest.MonkeyPatch, predictions: list[list[int]]
) -> list[torch.Tensor]:
    """Make model.decode return logits whose argmax is predictions[call] (a content
    sequence; EOS and padding are set by the decoder), or, where an entry is -1, the input
    token at that position; at 100 above the rest, so every chosen log-probability is 0.0 exactly
    in float32 (exact ties, whatever the scoring's rounding). Returns the inputs it was given."""
    inputs: list[torch.Tensor] = []

    def decode(memory, hyp, **kw):  # type: ignore[no-untyped-def]
        inputs.append(hyp.clone())
        wanted = torch.tensor(predictions[len(inputs) - 1])
        width = wanted.numel()
        tokens = hyp.clone()
        tokens[:, :width] = torch.where(wanted >= 0, wanted, hyp[:, :width])
        logits = torch.nn.functional.one_hot(tokens, CONFIG.vocab_size).float() * 100.0
        return DecoderOutput(logits)

    monkeypatch.setattr(model, "decode", decode)
    return inputs


@pytest.mark.parametrize("stutter", ["previous", "initial", "none"])
def test_stutter_remasking_and_final_dedup(
    stutter: str, untrained_padir: PadirModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = [10, 11, 12, 13, 14, 15]
    stuttering = [10, 10, 12, 12, 12, 15]  # stutters at positions 1, 3, 4
    inputs = fixed_predictions(untrained_padir, monkeypatch, [first, stuttering, stuttering])
    options = dataclasses.replace(PLAIN, steps=3, length_beam=1, stutter_remask=stutter, dedup=True)
    src = torch.tensor([[7, 8, EOS]])
    state = run(untrained_padir, src, options, lengths=torch.tensor([[7]]))
    x0 = state.initial[0, :6].tolist()
    assert inputs[1][0, :6].tolist() == first  # no stutter after the first pass
    expected = {
        "previous": [10, 11, 12, 13, 14, 15],
        "initial": [10, x0[1], 12, x0[3], x0[4], 15],
        "none": stuttering,
    }[stutter]
    assert inputs[2][0, :6].tolist() == expected
    assert inputs[2][0, 6] == EOS
    (result,) = refinement_finish(state, options)
    assert result.raw == stuttering  # the final pass is not remasked ...
    assert result.tokens == [10, 12, 15]  # ... its repeats are dropped
    (kept,) = refinement_finish(state, dataclasses.replace(options, dedup=False))
    assert kept.tokens == stuttering


def plain_repeated_ngrams(tokens: list[int], length: int, longest: int) -> set[int]:
    """The positions repeated_ngram_positions marks, by its definition, as a plain loop."""
    found = set()
    for n in range(1, longest + 1):
        for i in range(length - 2 * n + 1):
            if tokens[i : i + n] == tokens[i + n : i + 2 * n]:
                found |= set(range(i + n, i + 2 * n))
    return found


def test_repeated_ngram_positions() -> None:
    # A 3-gram repeated at 1 ("in a field in a field"), a 2-gram at 7, a stutter at 11, and
    # "13 12" repeated past the content (12 positions).
    tokens = torch.tensor([[7, 8, 9, 10, 8, 9, 10, 11, 12, 11, 12, 12, 13, 12, 13, PAD]])
    content = (torch.arange(16) < 12).unsqueeze(0)

    def marked_at(longest: int) -> list[int]:
        return repeated_ngram_positions(tokens, content, longest)[0].nonzero().flatten().tolist()

    assert marked_at(4) == marked_at(3) == [4, 5, 6, 9, 10, 11]
    assert marked_at(2) == [9, 10, 11] and marked_at(1) == [11]
    # n = 1 is the paper's stutter, as training remasks it between stages
    stutter = stutter_positions(tokens, content)
    assert torch.equal(repeated_ngram_positions(tokens, content, 1), stutter)
    rng = random.Random(36)
    rows, lengths = [], []
    for _ in range(300):
        rows.append([rng.choice([7, 8, 9][: rng.randint(1, 3)]) for _ in range(17)])
        lengths.append(rng.randint(0, 17))
    tokens = torch.tensor(rows)
    content = torch.arange(17) < torch.tensor(lengths).unsqueeze(1)
    for longest in (1, 2, 3, 5, MAX_STUTTER_NGRAM):
        marked = repeated_ngram_positions(tokens, content, longest)
        for row, length, got in zip(rows, lengths, marked, strict=True):
            expected = plain_repeated_ngrams(row, length, longest)
            assert set(got.nonzero().flatten().tolist()) == expected, (row, length, longest)
    assert marked.any() and not marked.all()


@pytest.mark.parametrize(
    ("tokens", "longest", "kept"),
    [
        ([7, 8, 9, 10, 8, 9, 10, 11], 3, [7, 8, 9, 10, 11]),  # in a field in a field .
        ([7, 8, 9, 10, 8, 9, 10, 11], 2, [7, 8, 9, 10, 8, 9, 10, 11]),  # a 3-gram: kept
        ([7, 8, 7, 8, 7, 8, 9], 2, [7, 8, 9]),  # the second and third copies
        ([7, 8, 9, 8, 9, 9, 7], 2, [7, 8, 9, 7]),  # dropping 8 9 leaves a stutter: dropped too
        ([7, 7, 7], 4, [7]),
        ([], 4, []),
    ],
)
def test_drop_repeats(tokens: list[int], longest: int, kept: list[int]) -> None:
    assert drop_repeats(torch.tensor(tokens, dtype=torch.long), longest).tolist() == kept


def test_drop_repeats_leaves_no_repeat() -> None:
    rng = random.Random(7)
    for _ in range(200):
        tokens = [rng.choice([7, 8, 9]) for _ in range(rng.randint(0, 20))]
        kept = drop_repeats(torch.tensor(tokens, dtype=torch.long), 4).tolist()
        assert not plain_repeated_ngrams(kept, len(kept), 4), (tokens, kept)
        rest = iter(tokens)
        assert all(t in rest for t in kept)  # a subsequence
        if not plain_repeated_ngrams(tokens, len(tokens), 4):
            assert kept == tokens


@pytest.mark.parametrize("stutter", ["previous", "initial", "none"])
@pytest.mark.parametrize("ngram", [1, 2, 3, MAX_STUTTER_NGRAM])
def test_repeated_ngrams_are_remasked_and_dropped_as_stutter(
    stutter: str, ngram: int, untrained_padir: PadirModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = list(range(7, 18))
    # A 2-gram repeated at 1 (second copy at 3, 4) and a 3-gram at 5 (second copy at 8-10).
    repeating = [7, 8, 9, 8, 9, 12, 13, 14, 12, 13, 14]
    inputs = fixed_predictions(untrained_padir, monkeypatch, [first, repeating, repeating])
    options = dataclasses.replace(
        PLAIN, steps=3, length_beam=1, stutter_remask=stutter, stutter_ngram=ngram
    )
    src = torch.tensor([[7, 8, EOS]])
    state = run(untrained_padir, src, options, lengths=torch.tensor([[12]]))
    source = {"previous": first, "initial": state.initial[0, :11].tolist()}.get(stutter)
    second = {1: [], 2: [3, 4]}.get(ngram, [3, 4, 8, 9, 10])
    assert inputs[2][0, :11].tolist() == [
        source[i] if source is not None and i in second else t for i, t in enumerate(repeating)
    ]
    (result,) = refinement_finish(state, options)
    assert result.raw == result.tokens == repeating  # the final pass is not remasked
    deduped = dataclasses.replace(options, dedup=True)
    (result,) = refinement_finish(state, deduped)
    assert result.tokens == [t for i, t in enumerate(repeating) if i not in second]


def test_tokens_left_at_their_initial_value_are_dropped(
    untrained_padir: PadirModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake decoder copies its input at positions 1 and 3 (-1) in the only pass.
    fixed_predictions(untrained_padir, monkeypatch, [[10, -1, 12, -1, 14]])
    options = dataclasses.replace(PLAIN, steps=1, length_beam=1, keep_initial_tokens=False)
    state = run(untrained_padir, torch.tensor([[7, 8, EOS]]), options, lengths=torch.tensor([[6]]))
    (result,) = refinement_finish(state, options)
    x0 = state.initial[0].tolist()
    assert result.raw == [10, x0[1], 12, x0[3], 14]
    assert result.tokens == [t for t, x in zip(result.raw, x0, strict=False) if t != x]
    assert len(result.tokens) <= 3
    assert result.log_prob == pytest.approx(float(state.token_log_probs[0].sum()))


def test_early_stop_when_the_next_input_repeats(
    untrained_padir: PadirModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pass 2 reproduces its input, so pass 3 would too: the candidate stops after 2 passes.
    fixed_predictions(untrained_padir, monkeypatch, [[10, 11, 12], [10, 11, 12]])
    options = dataclasses.replace(PLAIN, steps=10, length_beam=1, early_stop=True)
    state = run(untrained_padir, torch.tensor([[7, EOS]]), options, lengths=torch.tensor([[4]]))
    assert state.passes.tolist() == [2]


def test_identical_hypotheses_are_one_candidate_at_the_lowest_index(
    untrained_padir: PadirModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two random starts per length converge to the same argmax; float noise (here 1e-6,
    # 6e-8 was seen from a row's place in the batch) must not pick the later one.
    fixed_predictions(untrained_padir, monkeypatch, [[10, 11, 12, 13]])
    options = dataclasses.replace(PLAIN, steps=1, length_beam=2, random_starts=2)
    lengths = torch.tensor([[4, 5]])
    state = run(untrained_padir, torch.tensor([[7, 8, EOS]]), options, lengths=lengths)
    assert torch.equal(state.tokens[0], state.tokens[1])
    assert torch.equal(state.tokens[2], state.tokens[3])
    assert not torch.equal(state.tokens[1], state.tokens[2])  # same prefix, another length
    # Selection scores (log-probabilities summed over positions) set by hand: pair (0, 1)
    # differs by noise only; pair (2, 3) clearly, but is one hypothesis with 2's score.
    for sums in ([-2.0, -2.0 + 1e-6, -3.0, -3.0], [-2.0, -2.0, -3.0, -1.0]):
        log_probs = torch.zeros_like(state.token_log_probs)
        log_probs[:, 0] = torch.tensor(sums)
        (result,) = refinement_finish(
            dataclasses.replace(state, token_log_probs=log_probs), options
        )
        first = log_probs.sum(1).tolist()
        assert result.candidate == 0 and result.raw == [10, 11, 12]
        assert result.candidate_scores == [first[0], first[0], first[2], first[2]]
        assert (result.score, result.log_prob) == (first[0], first[0])


def random_filter_reference(
    tokens: list[int], initial: list[int], length: int, drop: bool, dedup: bool
) -> list[bool]:
    keep = []
    last = None
    for i, (t, x) in enumerate(zip(tokens, initial, strict=True)):
        ok = i < length - 1 and not (drop and t == x) and not (dedup and t == last)
        keep.append(ok)
        if ok:
            last = t
    return keep


@pytest.mark.parametrize("drop", [True, False])
@pytest.mark.parametrize("dedup", [True, False])
def test_output_mask_matches_a_plain_loop(drop: bool, dedup: bool) -> None:
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(6, 9, (50, 12), generator=g)  # 3 ids: many repeats
    initial = torch.randint(6, 9, (50, 12), generator=g)
    lengths = torch.randint(1, 13, (50,), generator=g)
    options = RefinementOptions(keep_initial_tokens=not drop, dedup=dedup)
    mask = output_mask(tokens, initial, lengths, options)
    for row in range(50):
        expected = random_filter_reference(
            tokens[row].tolist(), initial[row].tolist(), int(lengths[row]), drop, dedup
        )
        assert mask[row].tolist() == expected


def test_candidate_lengths_offsets_starts_and_clamping() -> None:
    options = RefinementOptions(length_offsets=(-1, 2), random_starts=2)
    lengths = candidate_lengths(torch.tensor([[3, 1], [32, 5]]), options, CONFIG)
    assert lengths.tolist() == [
        [3, 3, 2, 2, 5, 5, 1, 1, 1, 1, 3, 3],
        [32, 32, 31, 31, 32, 32, 5, 5, 4, 4, 7, 7],
    ]


def test_random_starts_differ_and_share_the_encoding(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    options = RefinementOptions(length_beam=2, random_starts=3)
    state = refinement_init(trained_padir, reversal[0][:2], options, 0)
    assert state.candidates == 6 and state.initial.shape[0] == 12
    per_length = state.lengths.view(2, 2, 3)
    assert torch.equal(per_length, per_length[..., :1].expand(-1, -1, 3))  # 3 starts a length
    starts = state.initial.view(2, 2, 3, -1)
    assert not torch.equal(starts[0, 0, 0], starts[0, 0, 1])
    # The memory follows the active rows (in ascending order of length): rows of one sentence
    # share its encoding, and the two sentences' differ.
    keys, sentence = state.memory.keys[0], state.rows // 6
    assert state.lengths[state.rows].diff().ge(0).all()
    for i in range(12):
        for j in range(12):
            same = bool(sentence[i] == sentence[j])
            assert torch.equal(keys[i], keys[j]) == same


def _mix_reference(x: int) -> int:
    """lowbias32 on Python integers (an independent implementation of draws.mix)."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_keyed_draw_follows_the_documented_rule() -> None:
    # The rule of gmlm.decoding.draws, recomputed on Python integers: changing it changes
    # every PaDIR output.
    words = torch.tensor([0, 1, 2**31, 2**32 - 1, 0x12345678])
    assert mix(words).tolist() == [_mix_reference(int(w)) for w in words]
    assert seed_word(0) == int.from_bytes(
        hashlib.blake2b(b"0", digest_size=8).digest()[:4], "little"
    )
    src = torch.tensor([[17, 9, 4, EOS], [9, 17, EOS, PAD]])
    keys = sentence_keys(src, PAD, seed=7)
    for row, key in zip(src.tolist(), keys.tolist(), strict=True):
        total = sum(
            _mix_reference(_mix_reference((j + POSITION) & MASK) ^ t)
            for j, t in enumerate(row)
            if t != PAD
        )
        assert key == _mix_reference((total & MASK) ^ seed_word(7))
    tokens = keyed_tokens(keys, 3, 5, CONFIG).view(2, 3, 5)
    span = CONFIG.vocab_size - CONFIG.n_special
    for b, key in enumerate(keys.tolist()):
        for k in range(3):
            row = _mix_reference(key ^ _mix_reference(k + CANDIDATE))
            expected = [
                CONFIG.n_special
                + _mix_reference((row + _mix_reference(i + POSITION)) & MASK) % span
                for i in range(5)
            ]
            assert tokens[b, k].tolist() == expected
    # A key is the sentence's own: not its padding, its row, or the seed's neighbours.
    wider = torch.nn.functional.pad(src, (0, 3), value=PAD)
    assert torch.equal(sentence_keys(wider, PAD, 7), keys)
    assert torch.equal(sentence_keys(src.flip(0), PAD, 7), keys.flip(0))
    assert len(set(sentence_keys(src, PAD, 8).tolist()) | set(keys.tolist())) == 4


def test_a_sentence_draws_its_initial_tokens_alone(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    # Whatever the batch, its width or the order: the same sentence and candidate lengths
    # give the same initial hypotheses (lengths are given, so no float is involved), and a
    # repeated sentence draws the same ones.
    src = reversal[0][:6].clone()
    src[4] = src[1]
    lengths = torch.tensor([[3, 6], [2, 5], [7, 4], [5, 1], [2, 5], [6, 7]])
    options = RefinementOptions(length_beam=2, random_starts=2)
    batch = refinement_init(trained_padir, src, options, 9, lengths)
    initial = batch.initial.view(6, 4, -1)
    for i in range(6):
        alone = refinement_init(trained_padir, src[i : i + 1], options, 9, lengths[i : i + 1])
        width = int(lengths[i].max())
        assert alone.initial.shape == (4, width)
        assert torch.equal(initial[i, :, :width], alone.initial)
        assert (initial[i, :, width:] == PAD).all()
    assert torch.equal(initial[1], initial[4])
    assert not torch.equal(
        initial[1],
        refinement_init(trained_padir, src, options, 10, lengths).initial.view(6, 4, -1)[1],
    )
    order = [5, 2, 0, 4, 1, 3]
    shuffled = refinement_init(trained_padir, src[order], options, 9, lengths[order])
    assert torch.equal(shuffled.initial.view(6, 4, -1), initial[order])


def test_remask_schedules() -> None:
    content = torch.tensor([10, 5])
    linear = RefinementOptions(steps=4, remask="linear")
    assert [remask_counts(content, t, linear).tolist() for t in (1, 2, 3)] == [
        [7, 3],
        [5, 2],
        [2, 1],
    ]
    constant = RefinementOptions(remask="constant", remask_ratio=0.3)
    assert remask_counts(content, 2, constant).tolist() == [3, 1]
    log_probs = torch.tensor([[-0.1, -3.0, -0.5, -2.0, -9.0]])
    content_mask = torch.tensor([[True, True, True, True, False]])
    picked = least_confident(log_probs, content_mask, torch.tensor([2]))
    assert picked.tolist() == [[False, True, False, True, False]]


def test_linear_remasking_runs_every_pass_and_resets_to_initial_tokens(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    options = RefinementOptions(steps=3, remask="linear", length_beam=2)
    state = run(trained_padir, reversal[0][:4], options)
    assert (state.passes == 3).all()


def test_returned_attention_is_the_last_pass_of_the_chosen_candidate(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:3]
    options = dataclasses.replace(PLAIN, steps=1, length_beam=2, return_attention=True)
    state = run(trained_padir, src, options)
    results = refinement_finish(state, options)
    with torch.no_grad():
        enc = trained_padir.encode(src)
        out = trained_padir.decode(
            enc.select(torch.arange(3).repeat_interleave(2)),
            state.initial,
            return_attention=True,
        )
    assert out.self_attention is not None and out.cross_attention is not None
    for sentence, result in enumerate(results):
        row, n = 2 * sentence + result.candidate, result.length
        s = int((src[sentence] != PAD).sum())
        assert result.self_attention is not None and result.cross_attention is not None
        assert result.self_attention.shape == (CONFIG.n_heads, n, n)
        assert result.cross_attention.shape == (CONFIG.n_heads, n, s)
        torch.testing.assert_close(result.self_attention, out.self_attention[row, :, :n, :n])
        torch.testing.assert_close(result.cross_attention, out.cross_attention[row, :, :n, :s])
        torch.testing.assert_close(result.cross_attention.sum(-1), torch.ones(CONFIG.n_heads, n))


def test_mask_start_and_option_errors(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:2]
    state = refinement_init(trained_padir, src, RefinementOptions(init="mask"), 0)
    content = (state.initial != PAD) & (state.initial != EOS)
    assert (state.initial[content] == CONFIG.mask_id).all()
    results = refine(trained_padir, src, RefinementOptions(init="mask"), 0)
    assert all(CONFIG.n_special <= t < CONFIG.vocab_size for r in results for t in r.tokens)
    bad = [
        (RefinementOptions(init="mask", random_starts=2), "random_starts"),
        (RefinementOptions(steps=0), "steps=0"),
        (RefinementOptions(length_offsets=(0, 1)), "length_offsets"),
        (RefinementOptions(length_beam=33), "length_beam=33"),
        (RefinementOptions(remask_ratio=1.0), "remask_ratio"),
        (RefinementOptions(stutter_ngram=0), r"stutter_ngram=0 must be between 1 and 16 \(1 is"),
        (RefinementOptions(stutter_ngram=MAX_STUTTER_NGRAM + 1), "stutter_ngram=17"),
    ]
    for options, message in bad:
        with pytest.raises(GmlmError, match=message):
            refine(trained_padir, src, options, 0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # Decoding cost grows with steps; the linear remask schedule runs every one of them.
        (RefinementOptions(steps=MAX_STEPS + 1), r"steps=1001 must be between 1 and 1000"),
        (RefinementOptions(steps=10**8, remask="linear"), r"steps=100000000 must be between"),
        # NaN passes every range check and would make every candidate score NaN.
        (
            RefinementOptions(length_score_weight=math.nan),
            r"length_score_weight=nan: expected a finite",
        ),
        (
            RefinementOptions(length_score_weight=-math.inf),
            r"length_score_weight=-inf: expected a finite",
        ),
        (RefinementOptions(length_penalty=math.inf), r"length_penalty=inf: expected a finite"),
    ],
)
def test_unbounded_and_non_finite_settings_are_errors(
    options: RefinementOptions, message: str
) -> None:
    with pytest.raises(GmlmError, match=message):
        options.validate(CONFIG)


def test_the_largest_step_count_is_allowed() -> None:
    RefinementOptions(steps=MAX_STEPS, remask="linear", length_score_weight=-2.5).validate(CONFIG)


def test_same_seed_same_output_and_scores_are_log_probabilities(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:6]
    options = RefinementOptions(return_steps=True)
    a = refine(trained_padir, src, options, 5)
    b = refine(trained_padir, src, options, 5)
    assert [(r.tokens, r.steps) for r in a] == [(r.tokens, r.steps) for r in b]
    other = refine(trained_padir, src, options, 6)
    assert all(r.steps[0] != o.steps[0] for r, o in zip(a, other, strict=True))
    assert all(r.score <= 0 and math.isfinite(r.score) for r in a)
    assert all(len(r.candidate_scores) == 5 for r in a)


def expected_survivors(
    state: RefinementState, options: RefinementOptions, keep: int
) -> list[list[int]]:
    """Per sentence, the `keep` candidates pruning keeps, by a plain loop over the final
    choice's scores: identical hypotheses count once (at their lowest index), then best score
    first, the lower index first on equal scores; candidates pruned already never."""
    k = state.candidates
    survivors = []
    for sentence, result in enumerate(refinement_finish(state, options)):
        rows = [state.tokens[sentence * k + i].tolist() for i in range(k)]
        distinct = [i for i in range(k) if rows[i] not in rows[:i]]
        alive = [i for i in distinct if not state.pruned[sentence * k + i]]
        ranked = sorted(alive, key=lambda i: (-result.candidate_scores[i], i))
        survivors.append(sorted(ranked[:keep]))
    return survivors


@pytest.mark.parametrize(("after", "keep"), [(1, 1), (1, 2), (2, 1)])
def test_pruning_keeps_the_best_candidates_and_runs_only_them(
    after: int,
    keep: int,
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = reversal[0]
    base = RefinementOptions(  # one decoder call per pass (no split), to count its rows
        steps=4, length_beam=3, random_starts=2, prune_after=0, return_steps=True,
        split_overhead=10**6,
    )  # fmt: skip
    pruning = dataclasses.replace(base, prune_after=after, prune_keep=keep)
    k = 6
    # The unpruned run, stopped by hand after `after` passes: what pruning ranks.
    state = refinement_init(trained_padir, src, base, 0)
    for _ in range(after):
        state = refinement_step(trained_padir, state, base)
    survivors = expected_survivors(state, pruning, keep)
    full = run(trained_padir, src, base)
    rows = record_decode_rows(trained_padir, monkeypatch)
    pruned = run(trained_padir, src, pruning)

    kept = torch.zeros(len(survivors), k, dtype=torch.bool)
    for sentence, chosen in enumerate(survivors):
        kept[sentence, chosen] = True
    kept = kept.flatten()
    assert torch.equal(pruned.pruned, ~kept)
    assert pruned.pruned.view(-1, k).sum(1).min() >= 1  # this test prunes in every sentence
    # The survivors run as they run unpruned; the others keep their tokens of pass `after`.
    assert torch.equal(pruned.tokens[kept], full.tokens[kept])
    assert torch.equal(pruned.tokens[~kept], state.tokens[~kept])
    assert torch.equal(pruned.passes[~kept], state.passes[~kept])
    assert (pruned.passes[~kept] <= after).all()
    # Each pass after the pruning runs only the survivors still refining.
    passes = pruned.passes.tolist()
    assert rows == [sum(p > t for p in passes) for t in range(max(passes))]
    assert all(count <= keep * src.shape[0] for count in rows[after:])
    # The choice: the best survivor, scored as unpruned (survivors that end identical are
    # one candidate at the lowest index; pruned candidates never merge with them).
    raw = candidate_scores(full.tokens, full.token_log_probs, full, base).tolist()
    for sentence, a in enumerate(refinement_finish(pruned, pruning)):
        assert a.candidate in survivors[sentence]
        rows = {i: full.tokens[sentence * k + i].tolist() for i in survivors[sentence]}
        first = {i: min(j for j in rows if rows[j] == rows[i]) for i in rows}
        best = max(rows, key=lambda i: (raw[sentence * k + first[i]], -first[i]))
        assert a.candidate == first[best]
        assert a.score == raw[sentence * k + first[best]]
        assert all(
            math.isinf(a.candidate_scores[i]) for i in range(k) if kept[sentence * k + i] == 0
        )


def test_pruning_in_stages_prunes_the_survivors_again(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """prune_keep (4, 2) after pass 1: the one-stage (4,) run up to pass 2, whose survivors
    are then ranked again and cut to 2; those run on exactly as in the one-stage run."""
    src, k = reversal[0], 6
    one = RefinementOptions(steps=4, length_beam=3, random_starts=2, prune_after=1, prune_keep=4)
    two = dataclasses.replace(one, prune_keep=(4, 2))
    state = refinement_init(trained_padir, src, one, 0)
    for _ in range(2):
        state = refinement_step(trained_padir, state, one)
    second = expected_survivors(state, one, 2)
    one_run, two_run = run(trained_padir, src, one), run(trained_padir, src, two)

    kept = torch.zeros(len(second), k, dtype=torch.bool)
    for sentence, chosen in enumerate(second):
        kept[sentence, chosen] = True
    kept = kept.flatten()
    assert torch.equal(two_run.pruned, ~kept)
    assert (state.pruned.view(-1, k).sum(1) == 2).all()  # the first stage kept 4 of 6 ...
    assert (two_run.pruned.view(-1, k).sum(1) == 4).all()  # ... the second 2 of those
    assert torch.equal(two_run.tokens[kept], one_run.tokens[kept])
    cut = kept.logical_not() & state.pruned.logical_not()  # pruned after pass 2
    assert torch.equal(two_run.tokens[cut], state.tokens[cut])
    assert torch.equal(two_run.passes[cut], state.passes[cut])  # 2, or 1 if it had stopped


@pytest.mark.parametrize("keep", [(), (2, 3), (0,), (3, 0)])
def test_pruning_counts_must_be_positive_and_not_increase(keep: tuple[int, ...]) -> None:
    from gmlm.decoding.options import decoding_options

    with pytest.raises(GmlmError, match="prune_keep"):
        decoding_options("padir", CONFIG, None, {"prune_keep": keep})


@pytest.mark.parametrize(("after", "keep"), [(0, 1), (4, 1), (6, 1), (1, 6), (2, 9)])
def test_pruning_that_removes_nothing_changes_nothing(
    after: int, keep: int, trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    # Off (0), at or after the last pass, or keeping all K = 6 candidates.
    base = RefinementOptions(steps=4, length_beam=3, random_starts=2, prune_after=0)
    off = run(trained_padir, reversal[0], base)
    on = run(
        trained_padir, reversal[0], dataclasses.replace(base, prune_after=after, prune_keep=keep)
    )
    assert torch.equal(off.tokens, on.tokens) and torch.equal(off.passes, on.passes)
    assert not on.pruned.any()


def test_pruning_ties_go_to_the_lowest_index(
    untrained_padir: PadirModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One-hot logits: every position has the same log-probability, so the mean selection
    # scores of the three lengths tie exactly; pruning keeps the lowest indices.
    fixed_predictions(untrained_padir, monkeypatch, [[10, 11, 12]] * 8)  # 2 runs, 4 passes
    src, lengths = torch.tensor([[7, 8, EOS]]), torch.tensor([[6, 4, 5]])
    for keep, survivors in ((1, [0]), (2, [0, 1])):
        options = dataclasses.replace(PLAIN, steps=4, length_beam=3, selection="mean")
        options = dataclasses.replace(options, prune_after=1, prune_keep=keep)
        state = run(untrained_padir, src, options, lengths=lengths)
        assert (~state.pruned).nonzero().flatten().tolist() == survivors
        assert state.passes.tolist() == [4 if i in survivors else 1 for i in range(3)]
        (result,) = refinement_finish(state, options)
        assert result.candidate == 0


def test_each_pass_width_makes_its_positions_once(
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The positions (with the positional attention projections) of a width are made by its
    first pass and reused by the later ones, which change only the tokens."""
    made: list[int] = []
    original = trained_padir.positions

    def counted(length: int, project: bool = False):  # type: ignore[no-untyped-def]
        made.append(length)
        return original(length, project)

    monkeypatch.setattr(trained_padir, "positions", counted)
    rows = record_decode_rows(trained_padir, monkeypatch)
    options = RefinementOptions(steps=4, length_beam=3, prune_after=0, split_overhead=10**6)
    src = reversal[0][:3]
    state = run(trained_padir, src, options)
    assert len(made) == len(set(made)) >= 1  # once per width
    assert len(rows) == state.step > len(made)  # reused by later passes
    assert set(made) == set(state.positions)


def _brute_force_groups(lengths: list[int], overhead: int) -> int:
    """The least cost over every partition of the rows into contiguous groups that keep rows of
    one length together (what width_groups minimises), by enumeration."""
    n = len(lengths)
    cuts = [i for i in range(1, n) if lengths[i] != lengths[i - 1]]
    best = None
    for mask in range(1 << len(cuts)):
        bounds = [0, *(c for b, c in enumerate(cuts) if mask >> b & 1), n]
        cost = sum(overhead + (e - s) * lengths[e - 1] for s, e in itertools.pairwise(bounds))
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


@pytest.mark.parametrize("overhead", [0, 3, 20, 1000])
def test_width_groups_are_the_cheapest_partition(overhead: int) -> None:
    rng = random.Random(overhead)
    for _ in range(200):
        lengths = sorted(rng.randint(1, 30) for _ in range(rng.randint(1, 12)))
        groups = width_groups(lengths, overhead)
        assert groups[0][0] == 0 and groups[-1][1] == len(lengths)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))
        assert all(lengths[e - 1] != lengths[e] for _, e in groups[:-1])  # lengths stay whole
        cost = sum(overhead + (e - s) * lengths[e - 1] for s, e in groups)
        assert cost == _brute_force_groups(lengths, overhead)
    assert width_groups([], 5) == []
    assert width_groups([4, 4, 9], 10**6) == [(0, 3)] and width_groups([4, 4, 9], 0) == [
        (0, 2),
        (2, 3),
    ]


def test_the_memory_estimate_grows_with_the_rows_and_their_width() -> None:
    base = refinement_bytes(CONFIG, rows=100, width=10, src_len=8)
    assert refinement_bytes(CONFIG, rows=200, width=10, src_len=8) == 2 * base
    assert refinement_bytes(CONFIG, rows=100, width=20, src_len=8) > 2 * base  # attention
    # batch 32 x length_beam 128 x random_starts 500 on the released models' size: terabytes.
    released = preset("small", vocab_size=8000, max_source_len=128, max_target_len=128)
    assert refinement_bytes(released, rows=32 * 128 * 500, width=128, src_len=40) > 2**40


def test_the_memory_estimate_is_at_least_the_tensors_it_names() -> None:
    """A lower bound of the peak: never less than the float32 logits, log-probabilities and
    their maximum, (rows, width, V) each, plus a layer's hidden states and feed-forward
    activations and the cross-attention memory of every layer."""
    config = preset("small", vocab_size=8000)  # the released models' size
    rows, width, src_len = 30, 12, 9
    logits = 3 * 4 * rows * width * config.vocab_size
    hidden = 4 * rows * width * (4 * config.d_model + config.d_ff)
    memory = 4 * rows * 2 * config.n_decoder_layers * src_len * config.d_model
    assert refinement_bytes(config, rows, width, src_len) > logits + hidden + memory


def test_identical_candidates_merge_only_among_the_eligible() -> None:
    """A candidate takes the index of the lowest identical candidate of its sentence, and with
    `eligible` only an eligible one's (a pruned candidate is never the one kept)."""
    tokens = torch.tensor([[5, 6], [5, 6], [7, 8], [5, 6], [1, 2], [1, 2], [1, 2], [3, 4]])
    assert first_identical(tokens, 4).tolist() == [[0, 0, 2, 0], [0, 0, 0, 3]]
    eligible = torch.tensor([False, True, True, True, True, False, True, True])
    assert first_identical(tokens, 4, eligible).tolist() == [[0, 1, 2, 1], [0, 1, 0, 3]]


def test_decoding_beyond_the_free_memory_is_refused_before_its_first_pass(
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gmlm.memory.available_bytes", lambda device="cpu": 2**30)
    passes: list[object] = []
    monkeypatch.setattr(trained_padir, "decode", lambda *a, **k: passes.append(a))
    src = reversal[0][:8]
    options = RefinementOptions(length_beam=32, random_starts=1000)
    with pytest.raises(
        MemoryLimitError,
        match=r"^PaDIR decoding of 8 sentence\(s\) with 32000 candidates each \(length_beam x "
        r"\(1 \+ length_offsets\) x random_starts\) of up to 32 tokens = 256,000 rows "
        r"\(vocabulary 20\) needs about [\d.]+ GiB of memory, but 1\.0 GiB is available; "
        r"lower --length-beam, --random-starts or the batch \(--max-tokens, --batch-size\)$",
    ):
        refine(trained_padir, src, options, 0)
    assert passes == []


def test_split_passes_decode_as_one_pass_does_with_less_padding(
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = reversal[0]
    base = RefinementOptions(steps=4, length_beam=5, length_offsets=(-2, 3), prune_after=0)
    whole = dataclasses.replace(base, split_overhead=10**6)
    split = dataclasses.replace(base, split_overhead=0)
    stats = {"whole": PaddingStats(), "split": PaddingStats()}
    calls = record_decode_rows(trained_padir, monkeypatch)
    one = refine(trained_padir, src, whole, 0, stats=stats["whole"])
    passes = len(calls)
    many = refine(trained_padir, src, split, 0, stats=stats["split"])
    assert len(calls) - passes > passes  # the same passes, as several calls each
    assert [r.tokens for r in many] == [r.tokens for r in one]
    assert [r.candidate for r in many] == [r.candidate for r in one]
    assert stats["split"].content == stats["whole"].content
    assert stats["split"].computed == stats["split"].content  # one call per length: no padding
    assert stats["whole"].padded_share > 0.1 and stats["split"].padded_share == 0.0
