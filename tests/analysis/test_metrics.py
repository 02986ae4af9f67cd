"""The attention metrics against values worked out by hand."""

from __future__ import annotations

import pytest
import torch

from gmlm.analysis.metrics import (
    cosine_distance,
    cross_pair_metrics,
    mean_std,
    over_heads,
    probability,
    self_pair_metrics,
    stutter_mask,
    summarize,
    top_indices,
    top_k_overlap,
    total_variation,
)
from tests.helpers.attention import SELF

# (left row, right row, TV, cosine distance, top-1 overlap, top-2 overlap)
GOLDEN = [
    ([0.5, 0.3, 0.2], [0.5, 0.3, 0.2], 0.0, 0.0, True, True),  # identical
    ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], 1.0, 1.0, False, True),  # disjoint one-hot; top-2 by tie
    ([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5], 1.0, 1.0, False, False),  # disjoint supports
    # TV = (0.2 + 0.2) / 2; cos = 0.48 / 0.52 = 12/13
    ([0.6, 0.4, 0.0], [0.4, 0.6, 0.0], 0.2, 1 / 13, False, True),
    # TV = (0.6 + 0.1 + 0.5) / 2; cos = 0.23 / 0.54; top-2 {0, 2} and {2, 1} share 2
    ([0.7, 0.1, 0.2], [0.1, 0.2, 0.7], 0.6, 31 / 54, False, True),
    ([0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25], 0.0, 0.0, True, True),  # all ties
]


@pytest.mark.parametrize(("p", "q", "tv", "cos", "top1", "top2"), GOLDEN)
def test_distances_and_overlap_golden(
    p: list[float], q: list[float], tv: float, cos: float, top1: bool, top2: bool
) -> None:
    left, right = torch.tensor(p), torch.tensor(q)
    assert float(total_variation(left, right)) == pytest.approx(tv, abs=1e-6)
    assert float(cosine_distance(left, right)) == pytest.approx(cos, abs=1e-6)
    assert bool(top_k_overlap(left, right, 1)) is top1
    assert bool(top_k_overlap(left, right, 2)) is top2
    # Symmetric in the two positions.
    assert float(total_variation(right, left)) == pytest.approx(tv, abs=1e-6)
    assert bool(top_k_overlap(right, left, 2)) is top2


def test_ties_go_to_the_lower_index_and_k_is_clamped() -> None:
    rows = torch.tensor([[0.2, 0.4, 0.4, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert top_indices(rows, 2).tolist() == [[1, 2], [0, 1]]
    assert top_indices(rows, 9).tolist() == [[1, 2, 0, 3], [0, 1, 2, 3]]
    with pytest.raises(ValueError):
        top_indices(rows, 0)


def test_zero_row_has_cosine_distance_one() -> None:
    assert float(cosine_distance(torch.zeros(3), torch.tensor([0.2, 0.3, 0.5]))) == 1.0


def test_cross_pair_metrics_batch_shapes() -> None:
    # Two pairs, two heads: head 0 of pair 0 identical, everything else from GOLDEN rows.
    left = torch.tensor([[[0.5, 0.3, 0.2], [1.0, 0.0, 0.0]], [[0.6, 0.4, 0.0], [0.7, 0.1, 0.2]]])
    right = torch.tensor([[[0.5, 0.3, 0.2], [0.0, 1.0, 0.0]], [[0.4, 0.6, 0.0], [0.1, 0.2, 0.7]]])
    out = cross_pair_metrics(left, right)
    assert set(out) == {"tv", "cosine", "top1", "top2"}
    torch.testing.assert_close(out["tv"], torch.tensor([[0.0, 1.0], [0.2, 0.6]]))
    torch.testing.assert_close(out["cosine"], torch.tensor([[0.0, 1.0], [1 / 13, 31 / 54]]))
    assert out["top1"].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert out["top2"].tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_self_pair_metrics_by_hand() -> None:
    starts = torch.tensor([0, 1])
    rows = SELF.transpose(0, 1)  # (N, H, N)
    out = self_pair_metrics(rows[starts], rows[starts + 1], starts)
    # Pair (0, 1): head 0 gives 0.6 / 0.5, head 1 (identity) 0 / 0. Pair (1, 2): 0.3 / 0.2.
    torch.testing.assert_close(out["next"], torch.tensor([[0.6, 0.0], [0.3, 0.0]]))
    torch.testing.assert_close(out["prev"], torch.tensor([[0.5, 0.0], [0.2, 0.0]]))
    # Top-1 of row 0 (head 0) is position 1; rows 1, 2 put top-1 on 0 and 3.
    # Identity head: row 0's top-2 is {0, 1} (ties to the lower index), so pair (0, 1) is in;
    # rows 1, 2 have top-2 {1, 0}, {2, 0}: neither holds the other position.
    assert out["top1"].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert out["top2"].tolist() == [[1.0, 1.0], [1.0, 0.0]]
    # Head 0, rows 0, 1: (0.4 + 0.5 + 0.1 + 0) / 2; rows 1, 2: (0.3 + 0.1 + 0.1 + 0.3) / 2.
    # Identity rows are disjoint.
    torch.testing.assert_close(out["tv"], torch.tensor([[0.5, 1.0], [0.4, 1.0]]))
    assert out["cosine"][:, 1].tolist() == [1.0, 1.0]


def test_head_and_pair_aggregation() -> None:
    values = torch.tensor([[0.6, 0.0], [0.3, 0.0]])
    heads = over_heads(values)
    assert heads["min"].tolist() == [0.0, 0.0]
    torch.testing.assert_close(heads["avg"], torch.tensor([0.3, 0.15]))
    torch.testing.assert_close(heads["max"], torch.tensor([0.6, 0.3]))
    summary = summarize(values)
    assert summary["avg"]["mean"] == pytest.approx(0.225)
    assert summary["avg"]["std"] == pytest.approx(0.075)  # population std of 0.3 and 0.15
    assert summary["min"] == {"mean": 0.0, "std": 0.0}
    assert probability(torch.tensor([[1.0, 1.0], [1.0, 0.0]])) == 0.75


def test_empty_groups_give_none_not_nan() -> None:
    empty = torch.zeros(0, 4)
    assert mean_std(empty[:, 0]) == {"mean": None, "std": None}
    assert summarize(empty) == {name: {"mean": None, "std": None} for name in ("min", "avg", "max")}
    assert probability(empty) is None
    assert mean_std(torch.tensor([0.4])) == {"mean": pytest.approx(0.4), "std": 0.0}


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([5, 5, 6, 7, 7, 7], [True, False, False, True, True]),
        ([1, 2, 1, 2], [False, False, False]),
        ([9, 9], [True]),
        ([4], []),
        ([], []),
    ],
)
def test_stutter_mask(tokens: list[int], expected: list[bool]) -> None:
    assert stutter_mask(tokens).tolist() == expected
    assert stutter_mask(torch.tensor(tokens, dtype=torch.long)).tolist() == expected
