from pathlib import Path

import pytest

from gmlm.data.binarized import load_dataset
from gmlm.data.lengths import OverLengthError, encode_inputs


def test_over_length_inputs_are_refused_or_reported(tiny_dataset: Path) -> None:
    tok = load_dataset(tiny_dataset).tokenizer
    short = "der Hund läuft."
    n = len(tok.encode(short)) + 1
    long = " ".join(["der große Hund springt über den kleinen Baum"] * 20)
    sentences = [short, long, short, long]
    with pytest.raises(
        OverLengthError, match=r"myfile\.de: 2 sentence\(s\) longer .*max_len="
    ) as err:
        encode_inputs(tok, sentences, max_len=n + 5, origin="myfile.de")
    assert "line 2 (" in str(err.value) and "line 4 (" in str(err.value)
    assert "never truncated" in str(err.value)
    report = encode_inputs(tok, sentences, max_len=n + 5, on_over_length="report")
    assert report.over_length == [1, 3]
    assert report.ids[1] == tok.encode(long)  # reported, not cut
    assert report.lengths[0] == n
    ok = encode_inputs(tok, ["  der  Hund\tläuft. "], max_len=n)  # cleaned like training text
    assert ok.ids == [tok.encode(short)] and ok.over_length == []


def test_many_over_length_lines_are_summarised(tiny_dataset: Path) -> None:
    tok = load_dataset(tiny_dataset).tokenizer
    with pytest.raises(OverLengthError, match=r"line 5 \(\d+ tokens\) and 3 more"):
        encode_inputs(tok, ["der Hund läuft schnell"] * 8, max_len=3)
