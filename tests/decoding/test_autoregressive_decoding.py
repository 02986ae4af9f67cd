"""Greedy and beam search: cache parity, beam 1 = greedy, n-best order, rows leaving."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from gmlm.decoding.autoregressive import (
    SearchOptions,
    beam_search,
    constrained_log_probs,
    greedy_search,
    max_lengths,
    search_bytes,
)
from gmlm.decoding.scores import length_penalty
from gmlm.errors import GmlmError
from gmlm.memory import MemoryLimitError
from gmlm.models import AutoregressiveModel
from gmlm.nn import preset
from tests.helpers.reversal import CONFIG, EOS, PAD


@torch.no_grad()
def recompute_greedy(
    model: AutoregressiveModel, src: torch.Tensor, options: SearchOptions
) -> tuple[list[int], float]:
    """Greedy decoding of one unpadded source (1, S) without a cache: the whole prefix goes
    through `model.forward` at every step."""
    limit = max_lengths(src, options, CONFIG)
    prefix = torch.tensor([[CONFIG.bos_id]])
    total = 0.0
    while True:
        logits = model(src, prefix)[:, -1]
        log_probs = constrained_log_probs(logits, prefix.shape[1], limit, options, CONFIG)
        best, token = log_probs.max(-1)
        total += float(best)
        if int(token) == EOS:
            return prefix[0, 1:].tolist(), total
        prefix = torch.cat([prefix, token.unsqueeze(0)], dim=1)


def unpadded(src: torch.Tensor, row: int) -> torch.Tensor:
    return src[row : row + 1, : int((src[row] != PAD).sum())]


@pytest.mark.parametrize("model_name", ["trained_ar", "untrained_ar"])
def test_cached_batched_greedy_equals_recomputation_per_sentence(
    model_name: str, request: pytest.FixtureRequest, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    model = request.getfixturevalue(model_name)
    src = reversal[0][:8]
    options = SearchOptions(max_len_a=1.0, max_len_b=3)
    hyps = greedy_search(model, src, options)
    for row, hyp in enumerate(hyps):
        tokens, log_prob = recompute_greedy(model, unpadded(src, row), options)
        assert hyp.tokens == tokens
        assert hyp.log_prob == pytest.approx(log_prob, abs=1e-4)
        assert hyp.score == pytest.approx(
            log_prob / float(length_penalty(len(tokens) + 1, options.length_penalty)), abs=1e-4
        )


def test_trained_greedy_reverses_and_finished_rows_leave_the_cache(
    trained_ar: AutoregressiveModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src, tgt = reversal
    rows_per_call = record_decode_rows(trained_ar, monkeypatch)
    hyps = greedy_search(trained_ar, src)
    lengths = [len(h.tokens) + 1 for h in hyps]
    correct = sum(h.tokens == t[t != PAD][:-1].tolist() for h, t in zip(hyps, tgt, strict=True))
    assert correct >= 12
    assert len(set(lengths)) >= 4  # targets of 3..6 words
    # Step t runs exactly the sentences not finished before it.
    assert rows_per_call == [sum(n > t for n in lengths) for t in range(max(lengths))]


def record_decode_rows(model: AutoregressiveModel, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch model.decode_step (on this instance, for this test) to log each call's rows."""
    calls: list[int] = []
    original = model.decode_step

    def logged(tokens, cache):  # type: ignore[no-untyped-def]
        calls.append(tokens.shape[0])
        return original(tokens, cache)

    monkeypatch.setattr(model, "decode_step", logged)
    return calls


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.5])
@pytest.mark.parametrize("model_name", ["trained_ar", "untrained_ar"])
def test_beam_one_is_greedy(
    alpha: float,
    model_name: str,
    request: pytest.FixtureRequest,
    reversal: tuple[torch.Tensor, torch.Tensor],
) -> None:
    model = request.getfixturevalue(model_name)
    src = reversal[0]
    greedy = greedy_search(model, src, SearchOptions(length_penalty=alpha))
    beam = beam_search(model, src, SearchOptions(beam=1, length_penalty=alpha))
    for g, b in zip(greedy, beam, strict=True):
        assert len(b) == 1
        assert b[0].tokens == g.tokens
        assert b[0].log_prob == pytest.approx(g.log_prob, abs=1e-5)
        assert b[0].score == pytest.approx(g.score, abs=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_nbest_is_sorted_and_beats_greedy(
    alpha: float, untrained_ar: AutoregressiveModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    # Not a theorem (greedy's prefix can fall out of the beam), but on these inputs the
    # untrained model's greedy output is a poor repetition that beam search must improve on.
    src = reversal[0][:6]
    greedy = greedy_search(untrained_ar, src, SearchOptions(length_penalty=alpha))
    nbest = beam_search(untrained_ar, src, SearchOptions(beam=4, length_penalty=alpha))
    improved = 0
    for g, hyps in zip(greedy, nbest, strict=True):
        assert len(hyps) == 4
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        for h in hyps:
            expected = h.log_prob / float(length_penalty(len(h.tokens) + 1, alpha))
            assert h.score == pytest.approx(expected, abs=1e-5)
        assert scores[0] >= g.score - 1e-5
        improved += scores[0] > g.score + 1e-3
    assert improved >= 1


def test_finished_sentences_leave_the_beam(
    trained_ar: AutoregressiveModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    src = reversal[0]
    rows_per_call = record_decode_rows(trained_ar, monkeypatch)
    beam_search(trained_ar, src, SearchOptions(beam=3))
    assert all(rows % 3 == 0 for rows in rows_per_call)
    assert rows_per_call[0] == 3 * src.shape[0]
    assert rows_per_call == sorted(rows_per_call, reverse=True)
    assert rows_per_call[-1] < rows_per_call[0]


def test_batched_beam_search_equals_each_sentence_alone(
    trained_ar: AutoregressiveModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    # Sentences retire at different steps, taking their rows of the cross-attention keys and
    # values with them; beams reordered within a sentence keep theirs.
    src = reversal[0]
    options = SearchOptions(beam=3, max_len_b=3)
    batched = beam_search(trained_ar, src, options)
    for i in range(src.shape[0]):
        width = int((src[i] != PAD).sum())
        (alone,) = beam_search(trained_ar, src[i : i + 1, :width], options)
        assert [h.tokens for h in batched[i]] == [h.tokens for h in alone]
        assert [h.score for h in batched[i]] == pytest.approx([h.score for h in alone], abs=1e-5)


@pytest.mark.parametrize("beam", [1, 3])
def test_min_and_max_length_fix_the_output_length(
    beam: int, untrained_ar: AutoregressiveModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:4]
    options = SearchOptions(beam=beam, min_length=6, max_length=6)
    if beam == 1:
        lengths = [len(h.tokens) for h in greedy_search(untrained_ar, src, options)]
    else:
        lengths = [len(h.tokens) for n in beam_search(untrained_ar, src, options) for h in n]
    assert set(lengths) == {5}


def test_length_limit_formula_and_cap() -> None:
    src = torch.tensor([[7, 8, EOS, PAD, PAD], [7, 8, 9, 10, EOS]])
    options = SearchOptions(max_len_a=1.5, max_len_b=2)
    assert max_lengths(src, options, CONFIG).tolist() == [6, 9]  # floor(1.5 * 3 + 2) = 6
    capped = SearchOptions(max_len_a=10.0, max_len_b=0)
    assert max_lengths(src, capped, CONFIG).tolist() == [30, CONFIG.max_target_len]


def test_constraints_ban_specials_and_force_eos() -> None:
    logits = torch.zeros(2, CONFIG.vocab_size)
    options = SearchOptions(min_length=3)
    early = constrained_log_probs(logits, 2, torch.tensor([9, 2]), options, CONFIG)
    # Row 0: EOS refused before min_length; row 1 at its limit: only EOS.
    assert math.isinf(early[0, EOS]) and early[0, CONFIG.n_special :].isfinite().all()
    assert early[1].isfinite().nonzero().flatten().tolist() == [EOS]
    assert early[:, : CONFIG.n_special].isinf().sum() == CONFIG.n_special * 2 - 1


def test_beam_search_without_options_is_beam_5(untrained_ar: AutoregressiveModel) -> None:
    """The documented default: beam_search(model, src) searches with beam 5 (an untrained
    model finishes many outputs, so a wider beam would return more of them)."""
    src = torch.tensor([[7, 8, 9, EOS], [9, 6, EOS, PAD]])
    default = beam_search(untrained_ar, src)
    assert [len(nbest) for nbest in default] == [5, 5]
    assert default == beam_search(untrained_ar, src, SearchOptions(beam=5))


def test_invalid_options_are_clear_errors(untrained_ar: AutoregressiveModel) -> None:
    src = torch.tensor([[7, EOS]])
    with pytest.raises(GmlmError, match=r"beam=0 must be between 1 and 1000 \(1 is greedy"):
        beam_search(untrained_ar, src, SearchOptions(beam=0))
    with pytest.raises(GmlmError, match="length_penalty"):
        greedy_search(untrained_ar, src, SearchOptions(length_penalty=-1.0))
    # NaN passes `< 0` checks; a NaN length limit would silently become some integer.
    with pytest.raises(GmlmError, match="max_len_a=nan: expected a finite number"):
        greedy_search(untrained_ar, src, SearchOptions(max_len_a=math.nan))
    with pytest.raises(GmlmError, match="length_penalty=inf: expected a finite number"):
        beam_search(untrained_ar, src, SearchOptions(beam=2, length_penalty=math.inf))


# --- beam search against brute-force enumeration -------------------------------------------

# Three ordinary tokens: every output of up to 4 tokens (EOS counted) can be enumerated.
SMALL = preset("tiny", vocab_size=CONFIG.n_special + 3, tie_embeddings=False)
ORDINARY = list(range(SMALL.n_special, SMALL.vocab_size))


@torch.no_grad()
def enumerate_outputs(
    model: AutoregressiveModel, src: torch.Tensor, limit: int, min_length: int
) -> dict[tuple[int, ...], float]:
    """Every output the search may return for one unpadded source (1, S), without EOS, with its
    summed log-probability (EOS included) from `model.forward` on the whole sequence: the
    lengths (EOS counted) min(min_length, limit) .. limit, over the ordinary tokens."""
    outputs = [
        words
        for length in range(min(min_length, limit), limit + 1)
        for words in itertools.product(ORDINARY, repeat=length - 1)
    ]
    targets = torch.tensor([[*w, EOS] + [PAD] * (limit - 1 - len(w)) for w in outputs])
    inputs = torch.cat([torch.full((len(outputs), 1), SMALL.bos_id), targets[:, :-1]], dim=1)
    log_probs = model(src.expand(len(outputs), -1), inputs).double().log_softmax(-1)
    picked = log_probs.gather(2, targets.unsqueeze(2)).squeeze(2)
    totals = picked.masked_fill(targets == PAD, 0.0).sum(1)
    return dict(zip(outputs, totals.tolist(), strict=True))


def gnmt_score(log_prob: float, tokens: int, alpha: float) -> float:
    return log_prob / ((5.0 + tokens + 1) / 6.0) ** alpha


@pytest.mark.parametrize(("alpha", "min_length"), [(0.0, 1), (0.6, 2), (1.5, 3)])
def test_exhaustive_beam_returns_every_output_ranked_as_enumeration_does(
    alpha: float, min_length: int
) -> None:
    torch.manual_seed(3)
    model = AutoregressiveModel(SMALL).eval()
    # Sources of 1, 2 and 3 words: limits a * src_len + b = 2, 3 and 4 (EOS counted).
    src = torch.tensor([[6, EOS, PAD, PAD], [7, 8, EOS, PAD], [8, 6, 7, EOS]])
    options = SearchOptions(
        beam=40, length_penalty=alpha, max_len_a=1.0, max_len_b=0, min_length=min_length
    )
    limits = max_lengths(src, options, SMALL).tolist()
    assert limits == [2, 3, 4]
    nbest = beam_search(model, src, options)
    for row, (hyps, limit) in enumerate(zip(nbest, limits, strict=True)):
        exact = enumerate_outputs(model, unpadded(src, row), limit, min_length)
        assert len(exact) <= options.beam  # at most 3 + 9 + 27 + 1 outputs
        # Every output, each once, with its exact log-probability and score, best first.
        assert sorted(tuple(h.tokens) for h in hyps) == sorted(exact)
        for h in hyps:
            assert h.log_prob == pytest.approx(exact[tuple(h.tokens)], abs=1e-5)
            assert h.score == pytest.approx(gnmt_score(h.log_prob, len(h.tokens), alpha), abs=1e-5)
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        best = max(gnmt_score(lp, len(w), alpha) for w, lp in exact.items())
        assert hyps[0].score == pytest.approx(best, abs=1e-5)


@pytest.mark.parametrize("beam", [2, 5])
def test_narrow_beam_returns_exact_scores_of_valid_distinct_outputs(beam: int) -> None:
    torch.manual_seed(4)
    model = AutoregressiveModel(SMALL).eval()
    src = torch.tensor([[6, 7, 8, EOS]])
    options = SearchOptions(beam=beam, max_length=4)
    (hyps,) = beam_search(model, src, options)
    exact = enumerate_outputs(model, src, 4, options.min_length)
    assert len(hyps) == beam and len({tuple(h.tokens) for h in hyps}) == beam
    for h in hyps:
        assert h.log_prob == pytest.approx(exact[tuple(h.tokens)], abs=1e-5)
    best = max(gnmt_score(lp, len(w), options.length_penalty) for w, lp in exact.items())
    assert hyps[0].score <= best + 1e-5  # beam search is not exact search


def test_the_memory_estimate_grows_with_each_size() -> None:
    base = search_bytes(CONFIG, SearchOptions(beam=5), batch=8, src_len=10)
    assert search_bytes(CONFIG, SearchOptions(beam=10), batch=8, src_len=10) == 2 * base
    assert search_bytes(CONFIG, SearchOptions(beam=5), batch=16, src_len=10) == 2 * base
    wider = preset("tiny", vocab_size=2 * CONFIG.vocab_size, max_target_len=32)
    assert search_bytes(wider, SearchOptions(beam=5), batch=8, src_len=10) > base
    # The released models' size: beam 1000 over a batch of 32 asks for gigabytes.
    released = preset("small", vocab_size=8000, max_source_len=128, max_target_len=128)
    assert search_bytes(released, SearchOptions(beam=1000), batch=32, src_len=40) > 4 * 2**30


def test_the_memory_estimate_holds_the_cache_of_the_longest_output() -> None:
    """A lower bound of the peak: every beam's keys and values, in every layer, of the longest
    output allowed (max_len_a * source length + max_len_b) and of the source."""
    options = SearchOptions(beam=3, max_len_a=1.5, max_len_b=4)
    batch, src_len = 2, 6
    length = min(int(1.5 * src_len + 4), CONFIG.max_target_len)
    cache = 4 * batch * 3 * 2 * CONFIG.n_decoder_layers * (length + src_len) * CONFIG.d_model
    assert search_bytes(CONFIG, options, batch, src_len) > cache


@pytest.mark.parametrize("beam", [1, 1000])
def test_a_search_beyond_the_free_memory_is_refused_before_it_starts(
    beam: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gmlm.memory.available_bytes", lambda device="cpu": 2**30)
    model = AutoregressiveModel(SMALL).eval()
    encoded: list[torch.Tensor] = []
    monkeypatch.setattr(model, "encode", lambda src: encoded.append(src))  # nothing runs
    rows = 2**27 // search_bytes(SMALL, SearchOptions(beam=beam), batch=1, src_len=4) * 16
    src = torch.tensor([[6, 7, 8, EOS]]).expand(rows, 4)
    with pytest.raises(
        MemoryLimitError,
        match=rf"^{'greedy' if beam == 1 else 'beam'} search of {rows} sentence\(s\) of up to 4 "
        rf"tokens with "
        rf"beam={beam} \(vocabulary 9, max_target_len 64\) needs about [\d.]+ GiB of memory, "
        r"but 1\.0 GiB is available; lower the beam \(--beam\) or the sentences per batch",
    ):
        (beam_search if beam > 1 else greedy_search)(model, src, SearchOptions(beam=beam))
    assert encoded == []
