"""PaDIR at fixed shapes (gmlm.decoding.fixed): the eager loop's results, bucketed shapes, and
no host sync inside the passes whatever T and the batch size are."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from gmlm.decoding import fixed
from gmlm.decoding.buckets import bucket, bucket_sizes
from gmlm.decoding.draws import sentence_keys
from gmlm.decoding.fixed import fixed_passes, refine_fixed
from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.refinement import (
    PaddingStats,
    Selection,
    candidate_lengths,
    initial_hypotheses,
    refine,
    refinement_init,
    refinement_step,
)
from gmlm.errors import GmlmError
from gmlm.models import PadirModel
from tests.helpers.reversal import CONFIG, PAD
from tests.helpers.syncs import counting_syncs


def test_buckets_are_few_and_waste_at_most_half() -> None:
    sizes = [bucket(v) for v in range(1, 4097)]
    assert sorted(set(sizes)) == sorted({2**p for p in range(13)} | {3 * 2**p for p in range(11)})
    for value, size in enumerate(sizes, start=1):
        assert value <= size <= max(value, 3 * value // 2)  # at most half of it padding
    assert all(a <= b for a, b in itertools.pairwise(sizes))  # monotone
    assert len(set(sizes[:256])) == 16
    # A limit (a position table) caps a bucket that would pass it; never below the value.
    assert bucket(100, 128) == 128 and bucket(100, 110) == 110 and bucket(130, 128) == 192
    with pytest.raises(GmlmError, match="at least 1"):
        bucket(0)
    # Every bucket up to a limit, as a two-implementation check: the set of bucket(v), v <= n.
    for limit in (1, 2, 5, 100, 256, 4096):
        assert bucket_sizes(limit) == sorted({bucket(v) for v in range(1, limit + 1)})


def _passes_inputs(
    model: PadirModel, src: torch.Tensor, options: RefinementOptions
) -> tuple[object, ...]:
    config = model.config
    enc = model.encode(src)
    lengths = model.predict_lengths(enc, options.length_beam) + options.length_shift
    per_sentence = candidate_lengths(lengths, options, config)
    k = per_sentence.shape[1]
    width = bucket(int(per_sentence.max()), config.max_target_len)
    keys = sentence_keys(src, config.pad_id, 0)
    initial = initial_hypotheses(per_sentence, config, keys, options.init, width)
    sentence = torch.arange(src.shape[0]).repeat_interleave(k)
    memory = model.cross_memory(enc).select(sentence)
    flat = per_sentence.flatten()
    return (
        memory,
        model.positions(width, project=True),
        initial,
        flat,
        torch.zeros(flat.shape),
        k,
    )


@pytest.mark.parametrize("steps", [1, 3, 8])
@pytest.mark.parametrize("sentences", [1, 9])
def test_the_passes_never_read_the_device(
    steps: int,
    sentences: int,
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Zero host reads in the T passes (early stopping, pruning and stutter remasking on),
    for every T and batch size: what lets the host queue them and a CUDA graph record them.
    The eager loop, for contrast, reads the device every pass."""
    src = reversal[0][:sentences]
    options = RefinementOptions(steps=steps, length_beam=3, random_starts=2, return_steps=True)
    inputs = _passes_inputs(trained_padir, src, options)
    with torch.no_grad(), counting_syncs(monkeypatch) as seen:
        fixed_passes(trained_padir, *inputs, options=options)  # type: ignore[arg-type]
    assert sum(seen.values()) == 0, seen
    state = refinement_init(trained_padir, src, options, 0)
    with torch.no_grad(), counting_syncs(monkeypatch) as eager:
        state = refinement_step(trained_padir, state, options)
    assert sum(eager.values()) > 0


@pytest.mark.parametrize("steps", [2, 6])
def test_a_fixed_decode_reads_the_device_a_fixed_number_of_times(
    steps: int,
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole decode: the lengths once and the chosen candidates in two copies, one row
    per sentence, whatever T and the batch size (the choice is made on the device; on a CPU
    the counter cannot tell a read of the device from one of a CPU copy, so the CPU copy's
    reads count too)."""
    counts = []
    for sentences in (1, 5, 16):
        src = reversal[0][:sentences]
        options = RefinementOptions(steps=steps)
        finished: list[tuple[object, ...]] = []  # the host's cutting, left out of the count
        monkeypatch.setattr(
            fixed, "selection_results", lambda *args, out=finished: out.append(args)
        )
        with torch.no_grad(), counting_syncs(monkeypatch) as seen:
            refine_fixed(trained_padir, src, options, 0, lengths=None)
        ((selection, _),) = finished
        assert isinstance(selection, Selection)
        assert selection.tokens.shape[0] == sentences
        assert selection.candidate_scores.shape == (sentences, options.length_beam)
        counts.append(dict(seen))
    # Three copies to the host (the lengths, the integers, the floats) and three reads of the
    # CPU copy of the lengths (the width, its bucket, the memory check): on every size.
    assert counts == [{"cpu": 3, "aten::_local_scalar_dense": 3}] * 3


OPTION_SETS = {
    "defaults": RefinementOptions(),
    "no pruning, random starts": RefinementOptions(prune_after=0, random_starts=2, length_beam=3),
    "mask init, linear remask": RefinementOptions(init="mask", remask="linear", steps=5),
    "initial stutter, offsets": RefinementOptions(
        stutter_remask="initial", length_offsets=(-1, 1), stutter_ngram=1
    ),
    "changed selection, length weight": RefinementOptions(
        selection="changed", length_score_weight=0.5, length_penalty=0.6, steps=3
    ),
    "constant remask, no early stop": RefinementOptions(
        remask="constant", remask_ratio=0.3, early_stop=False, return_steps=True
    ),
}


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_fixed_shapes_decode_as_the_eager_loop(
    name: str, trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Every sentence's tokens, choice, passes and steps as the eager loop's; the scores
    equal up to float rounding (the fixed shapes pad the matrix products wider)."""
    src = reversal[0]
    options = OPTION_SETS[name]
    eager_stats, fixed_stats = PaddingStats(), PaddingStats()
    eager = refine(trained_padir, src, options, 3, stats=eager_stats)
    fixed = refine_fixed(trained_padir, src, options, 3, stats=fixed_stats)
    for a, b in zip(eager, fixed, strict=True):
        assert (a.tokens, a.raw, a.candidate, a.length, a.passes, a.steps) == (
            b.tokens,
            b.raw,
            b.candidate,
            b.length,
            b.passes,
            b.steps,
        )
        assert b.score == pytest.approx(a.score, abs=1e-5)
        assert b.candidate_scores == pytest.approx(a.candidate_scores, abs=1e-5)
    # The same content; more computed (every candidate every pass, bucketed shapes).
    assert fixed_stats.content == eager_stats.content
    assert fixed_stats.computed >= eager_stats.computed


def test_fixed_shapes_take_given_lengths_and_a_planned_encoding(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:5]
    lengths = torch.tensor([[3, 6], [2, 5], [7, 4], [5, 1], [2, 2]])
    options = RefinementOptions(length_beam=2)
    encoded = trained_padir.encode(src)
    eager = refine(trained_padir, src, options, 1, lengths=lengths)
    fixed = refine_fixed(trained_padir, src, options, 1, lengths=lengths, encoded=encoded)
    assert [r.raw for r in fixed] == [r.raw for r in eager]
    assert [r.length for r in fixed] == [r.length for r in eager]
    with pytest.raises(GmlmError, match="no attention weights"):
        refine_fixed(trained_padir, src, dataclasses.replace(options, return_attention=True))


def test_padding_rows_and_width_do_not_change_a_sentence(
    trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    """Batches of 1 to 7 sentences (padded to buckets of 1, 2, 3, 4, 6, 8 rows) give each
    sentence what it gets alone."""
    src = reversal[0][:7]
    alone = [refine_fixed(trained_padir, src[i : i + 1])[0].raw for i in range(7)]
    for size in range(1, 8):
        batch = refine_fixed(trained_padir, src[:size])
        assert [r.raw for r in batch] == alone[:size]
    assert (src[:, -1] == PAD).any() and CONFIG.max_target_len >= 8
