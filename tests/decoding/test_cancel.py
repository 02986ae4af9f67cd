"""Decodes stop between passes, steps and batches once their thread's check says so
(gmlm.decoding.cancel), and run to the end otherwise."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from gmlm.decoding.autoregressive import SearchOptions, beam_search, greedy_search
from gmlm.decoding.cancel import Cancelled, cancellable, checkpoint
from gmlm.decoding.fixed import refine_fixed
from gmlm.decoding.options import RefinementOptions
from gmlm.decoding.refinement import refine
from gmlm.models import AutoregressiveModel, PadirModel


def after(calls: int) -> tuple[Callable[[], bool], list[int]]:
    """A check that turns true at its `calls`-th call (1-based), and the count of its calls."""
    seen = [0]

    def check() -> bool:
        seen[0] += 1
        return seen[0] >= calls

    return check, seen


def test_checkpoint_is_free_without_a_check_and_scoped_to_its_block() -> None:
    checkpoint()  # no check set: nothing happens
    with cancellable(lambda: True), pytest.raises(Cancelled):
        checkpoint()
    checkpoint()  # the block ended: its check is gone


@pytest.mark.parametrize("fixed", [False, True])
def test_padir_stops_before_the_pass_its_check_refuses(
    fixed: bool, trained_padir: PadirModel, reversal: tuple[torch.Tensor, torch.Tensor]
) -> None:
    src = reversal[0][:4]
    options = RefinementOptions(steps=6, early_stop=False, split_overhead=10**6)  # a call a pass
    decode = refine_fixed if fixed else refine
    passes = []
    original = trained_padir.decode

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        passes.append(1)
        return original(*args, **kwargs)

    trained_padir.decode = counted  # type: ignore[method-assign]
    try:
        check, seen = after(3)
        with cancellable(check), pytest.raises(Cancelled):
            decode(trained_padir, src, options)
        assert (seen[0], len(passes)) == (3, 2)  # two passes ran, the third was refused
        passes.clear()
        with cancellable(lambda: False):
            decode(trained_padir, src, options)
        assert len(passes) == 6
    finally:
        del trained_padir.decode


@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_ar_search_stops_between_steps(
    search: Callable[..., object],
    trained_ar: AutoregressiveModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
) -> None:
    src = reversal[0][:4]
    options = SearchOptions(beam=1 if search is greedy_search else 3)
    check, seen = after(2)
    with cancellable(check), pytest.raises(Cancelled):
        search(trained_ar, src, options)
    assert seen[0] == 2
    with cancellable(lambda: False):
        search(trained_ar, src, options)
