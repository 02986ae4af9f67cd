"""Text cleaning and pair filtering: the only changes gmlm makes to corpus text.

Cleaning (applied to every split, including the valid/test references):

* Unicode NFC composition (canonical, so no visible change: `é` stays `é`);
* whitespace normalisation: every run of Unicode whitespace (tabs, newlines, no-break spaces)
  becomes one ASCII space, and leading/trailing whitespace is removed.

Nothing else: no lowercasing, no punctuation or compatibility (NFKC) rewriting and no
tokenization, because translations are scored on cased, detokenized text. SentencePiece then
encodes the cleaned text losslessly (identity normalisation with byte fallback), so decoding
gives back exactly the cleaned string.

Filtering works on token counts and is reported per reason (see `DROP_REASONS`); a pair is
counted under the first reason that applies.
"""

from __future__ import annotations

import unicodedata

import numpy as np

# In the order they are checked.
DROP_REASONS: tuple[str, ...] = ("empty", "too_long", "length_ratio")


def normalize(text: str) -> str:
    """NFC and whitespace normalisation (see the module docstring); idempotent."""
    if not text.isascii() and not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


def filter_pairs(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    *,
    max_len: int,
    max_ratio: float | None,
) -> tuple[np.ndarray, dict[str, int]]:
    """Decide which pairs to keep from their token counts (EOS not included).

    `max_len` bounds the sequence length the models see, which includes the EOS every batch
    appends, so a side with more than `max_len - 1` tokens is `too_long`. `max_ratio` (None or
    0 to disable) drops pairs whose longer side has more than `max_ratio` times the tokens of
    the shorter one, the usual sign of a misaligned pair.
    Returns (keep mask (N,) bool, {reason: count} for every reason in DROP_REASONS).
    """
    src = np.asarray(src_lengths, dtype=np.int64)
    tgt = np.asarray(tgt_lengths, dtype=np.int64)
    if src.shape != tgt.shape:
        raise ValueError("src_lengths and tgt_lengths differ in shape")
    empty = (src == 0) | (tgt == 0)
    too_long = ~empty & ((src > max_len - 1) | (tgt > max_len - 1))
    if max_ratio:
        longer = np.maximum(src, tgt)
        shorter = np.maximum(np.minimum(src, tgt), 1)
        ratio = ~empty & ~too_long & (longer > max_ratio * shorter)
    else:
        ratio = np.zeros_like(empty)
    keep = ~(empty | too_long | ratio)
    counts = {
        "empty": int(empty.sum()),
        "too_long": int(too_long.sum()),
        "length_ratio": int(ratio.sum()),
    }
    return keep, counts
