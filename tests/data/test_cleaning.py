import numpy as np
import pytest

from gmlm.data.cleaning import filter_pairs, normalize


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("  Ein  Hund\tläuft.\r", "Ein Hund läuft."),
        ("e\u0301t\u00e9", "\u00e9t\u00e9"),  # NFD e + combining acute -> NFC é
        ("a\u00a0b\u2003c\nd", "a b c d"),  # no-break, em space and newline are whitespace
        ("Groß UND klein!", "Groß UND klein!"),  # case and punctuation untouched
        ("ﬁ ２ ，", "ﬁ ２ ，"),  # compatibility characters are not NFKC-folded
        ("", ""),
        (" \t ", ""),
    ],
)
def test_normalize(raw: str, clean: str) -> None:
    assert normalize(raw) == clean
    assert normalize(clean) == clean


def test_filter_pairs_counts_each_reason_once() -> None:
    src = np.array([5, 0, 70, 3, 10, 63, 1])
    tgt = np.array([6, 4, 5, 10, 0, 20, 3])
    keep, counts = filter_pairs(src, tgt, max_len=64, max_ratio=3.0)
    # 0 ok; 1 empty; 2 too long (70 > 63); 3 ratio 10/3 > 3; 4 empty; 5 ratio 63/20 > 3; 6 ratio 3
    assert keep.tolist() == [True, False, False, False, False, False, True]
    assert counts == {"empty": 2, "too_long": 1, "length_ratio": 2}
    keep, counts = filter_pairs(src, tgt, max_len=64, max_ratio=None)
    assert counts["length_ratio"] == 0 and keep.sum() == 4


def test_filter_pairs_boundaries() -> None:
    # max_len 8 holds 7 tokens and the EOS: 7 is kept, 8 on either side is too long
    src = np.array([7, 8, 7, 1, 1, 2])
    tgt = np.array([7, 7, 8, 3, 4, 6])
    keep, counts = filter_pairs(src, tgt, max_len=8, max_ratio=3.0)
    # the ratio: 3/1 and 6/2 are 3, kept; 4/1 is more than 3, dropped
    assert keep.tolist() == [True, False, False, True, False, True]
    assert counts == {"empty": 0, "too_long": 2, "length_ratio": 1}
