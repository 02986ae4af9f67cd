"""AR search at fixed shapes (gmlm.decoding.autoregressive_fixed): the eager search's
hypotheses, no host read inside a step, a bounded number of looks per search, and a few graph
signatures for every batch size."""

from __future__ import annotations

import math

import pytest
import torch

from gmlm.decoding import autoregressive_fixed
from gmlm.decoding.autoregressive import (
    SearchOptions,
    beam_init,
    beam_search,
    beam_step,
    greedy_search,
)
from gmlm.decoding.autoregressive_fixed import (
    SYNC_EVERY,
    fixed_search_start,
    fixed_search_step,
    search_fixed,
)
from gmlm.decoding.cancel import Cancelled, cancellable
from gmlm.decoding.cuda_graphs import graphed
from gmlm.models import AutoregressiveModel
from tests.helpers.syncs import counting_syncs

OPTION_SETS = {
    "greedy": SearchOptions(),
    "beam 2": SearchOptions(beam=2),
    "beam 5": SearchOptions(beam=5),
    "beam 4, no length penalty, short limits": SearchOptions(
        beam=4, length_penalty=0.0, max_len_a=1.0, max_len_b=3
    ),
    "beam 3, alpha 1, min length 6": SearchOptions(beam=3, length_penalty=1.0, min_length=6),
    "beam 3, a fixed length": SearchOptions(beam=3, min_length=7, max_length=7),
    "beam 12 (more than the live candidates early on)": SearchOptions(beam=12, max_len_b=4),
}


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
@pytest.mark.parametrize("model_name", ["trained_ar", "untrained_ar"])
@pytest.mark.parametrize("sentences", [1, 5, 16])
def test_fixed_search_gives_the_eager_search_hypotheses(
    name: str,
    model_name: str,
    sentences: int,
    request: pytest.FixtureRequest,
    reversal: tuple[torch.Tensor, torch.Tensor],
) -> None:
    """Every sentence's n-best list: the same tokens in the same order, the log-probabilities
    and scores equal up to float rounding (the cache is wider, its extra keys masked)."""
    model = request.getfixturevalue(model_name)
    src = reversal[0][:sentences]
    options = OPTION_SETS[name]
    eager = beam_search(model, src, options)
    fixed = search_fixed(model, src, options)
    assert [[h.tokens for h in nbest] for nbest in fixed] == [
        [h.tokens for h in nbest] for nbest in eager
    ]
    for a, b in zip(eager, fixed, strict=True):
        for x, y in zip(a, b, strict=True):
            assert math.isclose(x.log_prob, y.log_prob, rel_tol=1e-5, abs_tol=1e-5)
            assert math.isclose(x.score, y.score, rel_tol=1e-5, abs_tol=1e-5)
    if options.beam == 1:  # greedy search is beam search with one beam, here too
        assert [nbest[0].tokens for nbest in fixed] == [
            h.tokens for h in greedy_search(model, src, options)
        ]


@pytest.mark.parametrize("beam", [1, 5])
@pytest.mark.parametrize("sentences", [1, 9])
def test_a_step_never_reads_the_device(
    beam: int,
    sentences: int,
    trained_ar: AutoregressiveModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Zero host reads in a step, at the first step and later ones, for every beam and batch
    size: what lets a CUDA graph record a step. The eager step, for contrast, reads the device
    every step."""
    src = reversal[0][:sentences]
    options = SearchOptions(beam=beam)
    with torch.no_grad():
        state, _ = fixed_search_start(trained_ar, src, options)
        for _ in range(3):
            with counting_syncs(monkeypatch) as seen:
                fixed_search_step(trained_ar, state, options)
            assert sum(seen.values()) == 0, seen
        eager = beam_init(trained_ar, src, options)
        with counting_syncs(monkeypatch) as seen:
            beam_step(trained_ar, eager, options)
        assert sum(seen.values()) > 0


@pytest.mark.parametrize("beam", [1, 5])
def test_a_search_looks_at_the_device_once_every_few_steps(
    beam: int,
    trained_ar: AutoregressiveModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The limits once, whether every sentence is done once every SYNC_EVERY steps, and the
    hypotheses in two copies: whatever the batch size, the same count for the same steps."""
    calls: list[int] = []
    original = autoregressive_fixed.fixed_search_step

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(autoregressive_fixed, "fixed_search_step", counted)
    options = SearchOptions(beam=beam, max_length=12, min_length=12)  # 12 steps for everyone
    for sentences in (1, 5, 16):
        calls.clear()
        with torch.no_grad(), counting_syncs(monkeypatch) as seen:
            search_fixed(trained_ar, reversal[0][:sentences], options)
        monkeypatch.setattr(autoregressive_fixed, "fixed_search_step", counted)
        assert len(calls) == 12
        looks = (12 - 1) // SYNC_EVERY  # before steps 5 and 9 (none before the first)
        # The encoder's check that no source is empty, the limits' maximum, the looks, and two
        # copies back (whose reads on a CPU are reads of the CPU copy: tolist).
        assert seen["aten::_local_scalar_dense"] + seen["aten::is_nonzero"] == 2 + looks, seen
        assert seen["cpu"] == 2 and seen["aten::nonzero"] == 0, seen


def test_a_search_stops_within_sync_every_steps_of_the_last_sentence(
    trained_ar: AutoregressiveModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The eager search's steps, plus at most SYNC_EVERY - 1 (the host looks every few)."""
    src = reversal[0][:6]
    options = SearchOptions(beam=3)
    eager = beam_init(trained_ar, src, options)
    eager_steps = 0
    with torch.no_grad():
        while eager.rows.numel():
            eager = beam_step(trained_ar, eager, options)
            eager_steps += 1
    calls: list[int] = []
    original = autoregressive_fixed.fixed_search_step
    monkeypatch.setattr(
        autoregressive_fixed,
        "fixed_search_step",
        lambda *args: (calls.append(1), original(*args))[1],
    )
    search_fixed(trained_ar, src, options)
    assert eager_steps <= len(calls) < eager_steps + SYNC_EVERY


def test_graphs_cover_every_batch_size_with_a_few_signatures(
    trained_ar: AutoregressiveModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """The graphed copy (capture=False: the static state and padding without a GPU) replays
    one recording per bucket for every step; 16 batch sizes give the eager hypotheses from a
    few encoder and search signatures."""
    copy = graphed(trained_ar, capture=False)
    options = SearchOptions(beam=4)
    for sentences in range(1, 17):
        src = reversal[0][:sentences]
        expected = [nbest[0].tokens for nbest in beam_search(trained_ar, src, options)]
        assert [nbest[0].tokens for nbest in search_fixed(copy, src, options)] == expected
    runner = copy.graphs
    searches = [key for key in runner.recordings if key[0] == "search"]
    encoders = [key for key in runner.recordings if key[0] == "encode"]
    assert 0 < len(searches) <= 16 and 0 < len(encoders) <= 8  # row buckets 1, 2, 3, ..., 16
    assert len(searches) < 16  # shared between batch sizes


def test_a_fixed_search_stops_between_steps(
    trained_ar: AutoregressiveModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    seen = [0]

    def check() -> bool:
        seen[0] += 1
        return seen[0] >= 3

    with cancellable(check), pytest.raises(Cancelled):
        search_fixed(trained_ar, reversal[0][:4], SearchOptions(beam=3))
    assert seen[0] == 3
