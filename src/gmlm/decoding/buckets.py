"""Shapes rounded up to a few buckets, so that a GPU meets a few shapes, not one per batch.

A CUDA graph, a cuDNN plan or a compiled kernel is made per shape; a service meets a new
batch size and width at almost every batch. Rounding rows and widths up to the sizes 1, 2,
3, 4, 6, 8, 12, 16, 24, 32, 48, ... (the powers of two and 1.5 times them) leaves
2 log2(n) shapes up to n, at most half of a dimension as padding (a third on average), which
the decoders mask (padded keys get no attention weight, padded rows are dropped).
"""

from __future__ import annotations

from gmlm.errors import GmlmError


def bucket(value: int, limit: int | None = None) -> int:
    """The smallest bucket size (module docstring) at least `value` (>= 1), but at most
    `limit` (e.g. a model's position table) where `value` fits it."""
    if value < 1:
        raise GmlmError(f"bucket: a size must be at least 1, got {value}")
    power = 1
    while True:  # 1, then 2, 3, 4, 6, 8, 12, ...: each power of two p, then 1.5 p
        size = next((c for c in (power, power * 3 // 2) if c >= value and c >= power), None)
        if size is not None:
            break
        power *= 2
    if limit is not None and value <= limit < size:
        return limit
    return size


def bucket_sizes(limit: int) -> list[int]:
    """Every bucket a size from 1 to `limit` rounds up to, in order: 1, 2, 3, 4, 6, ...,
    bucket(limit)."""
    sizes = [bucket(1)]
    while sizes[-1] < limit:
        sizes.append(bucket(sizes[-1] + 1))
    return sizes


__all__ = ["bucket", "bucket_sizes"]
