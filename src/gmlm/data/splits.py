"""Deterministic train / valid / test assignment by hashing a stable key.

A pair's split depends only on its key (a Bible verse id such as `40:5:22`, or the cleaned
source sentence for plain corpora) and on the fractions, never on the order or size of the
corpus, the random seed or the machine. Hashing the source sentence sends every duplicate of
a sentence to the same split, so a test sentence cannot also appear in training.

The unit interval is cut in a fixed order: `[0, test)` is test, the next `valid` is valid, the
rest is train. Carving only one split (say test, when the valid split was given separately)
therefore picks exactly the test keys it would pick when carving both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

SPLITS: tuple[str, ...] = ("train", "valid", "test")
_SALT = b"gmlm-split-v1\x00"


def key_position(key: str) -> float:
    """Where `key` falls in [0, 1): the first 8 bytes of a salted SHA-256, as a fraction."""
    digest = hashlib.sha256(_SALT + key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign_splits(
    keys: Sequence[str], *, valid_fraction: float = 0.0, test_fraction: float = 0.0
) -> list[str]:
    """The split name ("train", "valid" or "test") of each key."""
    if not (valid_fraction >= 0 and test_fraction >= 0 and valid_fraction + test_fraction < 1):
        raise ValueError("fractions must be >= 0 and sum to less than 1")
    out = []
    for key in keys:
        pos = key_position(key)
        if pos < test_fraction:
            out.append("test")
        elif pos < test_fraction + valid_fraction:
            out.append("valid")
        else:
            out.append("train")
    return out
