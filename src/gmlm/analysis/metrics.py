"""How alike the attention of two adjacent output positions is: the pure tensor math behind
the stutter analysis of Li et al. (ICML 2024, Section 3.4, Tables 4 and 5).

A *pair* is two adjacent positions (i, i+1) of a generated hypothesis; it is a *stutter pair*
when both hold the same token id. Every function here takes the attention rows of P pairs:
``left`` (P, H, K) the rows of the positions i and ``right`` (P, H, K) those of i+1, for H
heads over K keys (target positions for self-attention, source tokens for cross-attention),
and returns one value per pair and head, (P, H). Definitions:

* total variation ``tv = 1/2 * sum_k |p_k - q_k|`` (0 for equal rows, 1 for disjoint ones);
* cosine distance ``1 - <p, q> / (|p| |q|)`` (0 for equal rows, 1 for disjoint ones);
  an all-zero row counts as sharing nothing, distance 1;
* top-k sets: the k keys of largest weight; ties go to the lower key index, so the result is
  deterministic (a stable sort) and two equal rows always have equal top-k sets; k larger than
  K means all K keys;
* cross-attention top-k overlap: the two top-k sets share at least one source token;
* self-attention weights between the pair, both directions: ``next`` the weight position i
  gives to i+1, ``prev`` the weight i+1 gives to i;
* self-attention top-k: "one position is among the other's top-k attended positions"
  (docs/DESIGN.md section 4): i+1 is in the top-k of row i, or i is in the top-k of row i+1.

Heads are then aggregated per pair (min / avg / max over heads, :func:`over_heads`) and pairs
per group (mean and standard deviation, :func:`summarize`); a top-k indicator becomes a
probability, the mean over pairs and heads (:func:`probability`). Empty groups give None.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

TOP_K = (1, 2)
HEAD_AGGREGATES = ("min", "avg", "max")


def stutter_mask(tokens: Sequence[int] | Tensor) -> Tensor:
    """(N-1,) bool over the adjacent pairs (i, i+1) of N token ids: True where both are the
    same id (a token-level stutter). Fewer than two tokens: no pairs."""
    ids = torch.as_tensor(tokens, dtype=torch.long)
    return ids[1:] == ids[:-1]


def total_variation(left: Tensor, right: Tensor) -> Tensor:
    """(..., K), (..., K) -> (...,): half the L1 distance."""
    return 0.5 * (left - right).abs().sum(-1)


def cosine_distance(left: Tensor, right: Tensor) -> Tensor:
    """(..., K), (..., K) -> (...,): 1 - cosine similarity; 1 when either row is all zero."""
    dot = (left * right).sum(-1)
    norms = left.norm(dim=-1) * right.norm(dim=-1)
    similarity = torch.where(norms > 0, dot / norms.clamp_min(torch.finfo(dot.dtype).tiny), 0.0)
    return (1.0 - similarity).clamp(0.0, 2.0)


def top_indices(rows: Tensor, k: int) -> Tensor:
    """(..., K) -> (..., min(k, K)): the keys of the k largest weights, largest first; equal
    weights in key order (a stable sort), so the result never depends on the kernel."""
    if k < 1:
        raise ValueError(f"k={k} must be at least 1")
    order = torch.sort(rows, dim=-1, descending=True, stable=True).indices
    return order[..., :k]


def top_k_overlap(left: Tensor, right: Tensor, k: int) -> Tensor:
    """(..., K), (..., K) -> (...,) bool: the two rows' top-k key sets intersect."""
    a, b = top_indices(left, k), top_indices(right, k)
    return (a.unsqueeze(-1) == b.unsqueeze(-2)).flatten(-2).any(-1)


def in_top_k(rows: Tensor, keys: Tensor, k: int) -> Tensor:
    """rows (P, H, K), keys (P,) -> (P, H) bool: key keys[p] is in the top-k of rows[p, h]."""
    return (top_indices(rows, k) == keys[:, None, None]).any(-1)


def cross_pair_metrics(left: Tensor, right: Tensor) -> dict[str, Tensor]:
    """Cross-attention rows of the pairs, (P, H, S) each -> (P, H) per metric: "tv",
    "cosine", and "top1", "top2" (1.0 where the top-k source tokens overlap, else 0.0)."""
    left, right = left.float(), right.float()
    out = {"tv": total_variation(left, right), "cosine": cosine_distance(left, right)}
    for k in TOP_K:
        out[f"top{k}"] = top_k_overlap(left, right, k).float()
    return out


def self_pair_metrics(left: Tensor, right: Tensor, starts: Tensor) -> dict[str, Tensor]:
    """Self-attention rows of the pairs (i, i+1), (P, H, N) each, with i = starts (P,) ->
    (P, H) per metric: "next" (weight of i on i+1), "prev" (weight of i+1 on i), "top1",
    "top2" (1.0 where i+1 is in the top-k of row i or i is in the top-k of row i+1), and,
    beyond the paper, "tv" and "cosine" between the two rows."""
    left, right = left.float(), right.float()
    starts = starts.to(device=left.device, dtype=torch.long)
    heads = left.shape[1]
    following = (starts + 1)[:, None, None].expand(-1, heads, 1)
    out = {
        "next": left.gather(-1, following).squeeze(-1),
        "prev": right.gather(-1, starts[:, None, None].expand(-1, heads, 1)).squeeze(-1),
    }
    for k in TOP_K:
        out[f"top{k}"] = (in_top_k(left, starts + 1, k) | in_top_k(right, starts, k)).float()
    out["tv"] = total_variation(left, right)
    out["cosine"] = cosine_distance(left, right)
    return out


def over_heads(values: Tensor) -> dict[str, Tensor]:
    """(P, H) -> {"min", "avg", "max"}: (P,) each, aggregated over the heads of every pair."""
    return {"min": values.amin(1), "avg": values.mean(1), "max": values.amax(1)}


def mean_std(values: Tensor) -> dict[str, float | None]:
    """(P,) -> {"mean", "std"} over the pairs (population std, i.e. divided by P); None for
    both when P = 0."""
    if values.numel() == 0:
        return {"mean": None, "std": None}
    values = values.double()
    return {"mean": float(values.mean()), "std": float(values.std(correction=0))}


def summarize(values: Tensor) -> dict[str, dict[str, float | None]]:
    """(P, H) -> {"min" | "avg" | "max": {"mean", "std"}}: the head aggregate of each pair,
    then its mean and std over the pairs."""
    return {name: mean_std(v) for name, v in over_heads(values).items()}


def probability(indicators: Tensor) -> float | None:
    """(P, H) of 0/1 -> the share of (pair, head) combinations that are 1; None for P = 0."""
    return float(indicators.double().mean()) if indicators.numel() else None
