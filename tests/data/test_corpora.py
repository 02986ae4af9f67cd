import gzip
import json
from pathlib import Path

import pytest

from gmlm.data.corpora import (
    multi30k_files,
    multi30k_test_missing,
    parse_spec,
    read_corpus,
    read_multi30k,
)
from gmlm.data.textfiles import read_lines
from gmlm.errors import GmlmError
from tests.helpers.corpora import MULTI30K, write_lines


def test_read_lines_plain_gz_bom_and_crlf(tmp_path: Path) -> None:
    plain = tmp_path / "a.txt"
    plain.write_bytes("\ufeffeins\r\nzwei\u2028drei\n\nvier".encode())
    assert read_lines(plain) == ["eins\r", "zwei\u2028drei", "", "vier"]
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(b"x\ny\n"))
    assert read_lines(packed) == ["x", "y"]


def test_lone_carriage_returns_inside_lines_stay_text(tmp_path: Path) -> None:
    # Only \n ends a line (as for sacrebleu and wc -l): a stray CR is whitespace to cleaning.
    path = tmp_path / "a.txt"
    path.write_bytes(b"ein\rHund\nzwei\r\n")
    assert read_lines(path) == ["ein\rHund", "zwei\r"]


@pytest.mark.parametrize("data", [b"eins\rzwei\rdrei\r", b"eins\rzwei", b"a\rb\rc\nd\r"])
def test_carriage_return_line_ends_are_an_error(tmp_path: Path, data: bytes) -> None:
    # Read by the rule above, an old Mac file would be one long line, translated or scored as
    # one sentence.
    path = tmp_path / "mac.txt"
    path.write_bytes(data)
    with pytest.raises(GmlmError, match=r"mac\.txt: ends its lines with carriage returns.*tr "):
        read_lines(path)


def test_byte_order_mark_inside_a_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "joined.txt"  # `cat a b` of two files that each start with a BOM
    path.write_bytes("\ufeffeins\nzwei\n\ufeffdrei\n".encode())
    with pytest.raises(GmlmError, match=r"joined\.txt:3: a byte-order mark .* column 1.*sed"):
        read_lines(path)
    path.write_bytes("eins\nzw\ufeffei\n".encode())
    with pytest.raises(GmlmError, match=r"joined\.txt:2: a byte-order mark .* column 3"):
        read_lines(path)


def test_a_folder_is_not_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GmlmError, match=r"is a folder; give the path of a file inside it"):
        read_lines(tmp_path)


def test_reads_files_that_are_not_regular(tmp_path: Path) -> None:
    # A pipe, as from bash's <(zcat corpus.gz), is a file to read, not a missing one.
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(b"eins\nzwei\n",))
    writer.start()
    try:
        assert read_lines(fifo) == ["eins", "zwei"]
    finally:
        writer.join(timeout=10)
        if writer.is_alive():  # the pipe was never opened for reading: unblock the writer
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            writer.join()


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"gut\nnoch gut\nsch\xf6n\n")
    with pytest.raises(GmlmError, match=r"bad\.de:3: invalid UTF-8 .*column 4.*iconv"):
        read_lines(bad)


@pytest.mark.parametrize(
    ("encoding", "named"),
    [
        ("utf-16", "utf-16"),  # with its byte-order mark, as Python and Windows write it
        ("utf-16-be", "utf-16be"),  # no mark: every other byte a NUL, which comes first
        ("utf-16-le", "utf-16le"),
        ("utf-32", "utf-32"),
        ("latin-1", "latin1"),
    ],
)
def test_text_in_another_encoding_gets_the_conversion_that_fits(
    tmp_path: Path, encoding: str, named: str
) -> None:
    # Each conversion named in the error turns the file into the text it holds.
    text = "Ein Hund läuft über die Wiese.\nZwei Männer.\n"
    bad = tmp_path / "in.de"
    bad.write_bytes(text.encode(encoding))
    with pytest.raises(GmlmError, match=f"`iconv -f {named} -t utf-8 IN > OUT`") as caught:
        read_lines(bad)
    assert str(caught.value).startswith(f"{bad}")
    assert bad.read_bytes().decode(named) == text


@pytest.mark.parametrize(
    ("encoding", "named"), [("utf-16-le", "utf-16le"), ("utf-16-be", "utf-16be")]
)
def test_utf16_of_ascii_letters_alone_is_refused_though_it_decodes_as_utf8(
    tmp_path: Path, encoding: str, named: str
) -> None:
    # No byte-order mark and no letter beyond ASCII: every byte pair is valid UTF-8.
    text = "Ein Hund rennt durch den Schnee.\nZwei Kinder spielen.\n"
    bad = tmp_path / "in.de"
    bad.write_bytes(text.encode(encoding))
    assert "\x00" in bad.read_bytes().decode("utf-8")
    with pytest.raises(GmlmError, match=f"{named.upper()} text, not UTF-8.*iconv -f {named} "):
        read_lines(bad)


def test_a_nul_byte_is_refused_naming_its_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "in.de"
    bad.write_bytes(b"gut\nnoch gut\nein\x00Hund\n")
    with pytest.raises(GmlmError, match=r"in\.de:3: a NUL byte at column 4; .*tr -d"):
        read_lines(bad)


def test_bad_gzip_and_missing_file(tmp_path: Path) -> None:
    fake = tmp_path / "x.gz"
    fake.write_bytes(b"not gzip at all")
    with pytest.raises(GmlmError, match=r"x\.gz: not a valid gzip file"):
        read_lines(fake)
    with pytest.raises(GmlmError, match=r"nope\.txt: file not found"):
        read_lines(tmp_path / "nope.txt")


def test_mismatched_line_counts_name_both_files(tmp_path: Path) -> None:
    src = write_lines(tmp_path / "t.de", ["a", "b", "c"])
    tgt = write_lines(tmp_path / "t.en", ["a", "b"])
    with pytest.raises(GmlmError, match=r"t\.de has 3 lines but .*t\.en has 2"):
        read_corpus(f"files:{src},{tgt}")


@pytest.mark.parametrize(
    "spec", ["nonsense", "wmt:foo", "files:", "bible", "FILES", "zip:a.zip", ""]
)
def test_unknown_corpus_spec(spec: str) -> None:
    with pytest.raises(GmlmError, match=r"unknown corpus spec .*expected one of: bible:PAIR"):
        parse_spec(spec)


def test_files_spec_languages_and_separate_splits(tmp_path: Path) -> None:
    src = write_lines(tmp_path / "train.de.gz", ["Hallo Welt", "Guten Tag"])
    tgt = write_lines(tmp_path / "train.en", ["Hello world", "Good day"])
    dev = write_lines(tmp_path / "dev.tsv", ["Ja\tYes"])
    corpus = read_corpus(f"files:{src},{tgt}", valid=f"tsv:{dev}")
    assert (corpus.src_lang, corpus.tgt_lang) == ("de", "en")
    assert corpus.splits["train"].tgt == ["Hello world", "Good day"]
    assert corpus.splits["valid"].src == ["Ja"]
    with pytest.raises(GmlmError, match="expected files:SRC,TGT"):
        read_corpus(f"files:{src}")
    with pytest.raises(GmlmError, match="defines its own splits"):
        read_corpus("bible:de-en", valid=f"tsv:{dev}")


def test_tsv_and_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    tsv = write_lines(tmp_path / "c.tsv", ["a\tb", "only one field", "c\td"])
    with pytest.raises(GmlmError, match=r"c\.tsv:2: expected 2 tab-separated fields"):
        read_corpus(f"tsv:{tsv}")
    rows = [json.dumps({"translation": {"de": "Hund", "en": "dog"}}), "", "{broken"]
    jsonl = write_lines(tmp_path / "c.jsonl", rows)
    with pytest.raises(GmlmError, match=r"c\.jsonl:3: invalid JSON"):
        read_corpus(f"jsonl:{jsonl}:de,en")
    jsonl = write_lines(tmp_path / "d.jsonl", rows[:1])
    corpus = read_corpus(f"jsonl:{jsonl}:de,en")
    assert corpus.splits["train"].src == ["Hund"] and corpus.src_lang == "de"
    with pytest.raises(GmlmError, match=r"d\.jsonl:1: no string field 'src'"):
        read_corpus(f"jsonl:{jsonl}")


def test_multi30k_missing_files(tmp_path: Path) -> None:
    with pytest.raises(GmlmError, match=r"holds no Multi30k split.*test_2016_flickr"):
        read_multi30k(tmp_path, "de", "en")
    assert (
        multi30k_test_missing(f"multi30k:{tmp_path / 'nope'}") == f"no folder {tmp_path / 'nope'}"
    )
    write_lines(tmp_path / "val.en", ["A dog."])
    with pytest.raises(GmlmError, match=r"has val\.en but neither val\.de\.gz nor val\.de"):
        read_multi30k(tmp_path, "de", "en")
    message = multi30k_test_missing(f"multi30k:{tmp_path}")
    assert message == f"{tmp_path} has no test_2016_flickr.de or test_2016_flickr.en[.gz]"


def test_multi30k_files_of_one_split(tmp_path: Path) -> None:
    """A split's two files, .gz or plain; an error names what is missing."""
    with pytest.raises(GmlmError, match=r"nope: no such folder; give the Multi30k folder"):
        multi30k_files(tmp_path / "nope", "test", "de", "en")
    write_lines(tmp_path / "test_2016_flickr.en.gz", ["A dog."])
    with pytest.raises(GmlmError, match=r"has no test_2016_flickr\.de\[\.gz\]; add the test"):
        multi30k_files(tmp_path, "test", "de", "en")
    write_lines(tmp_path / "test_2016_flickr.de", ["Ein Hund."])
    assert multi30k_files(tmp_path, "test", "de", "en") == (
        tmp_path / "test_2016_flickr.de",
        tmp_path / "test_2016_flickr.en.gz",
    )
    with pytest.raises(GmlmError, match=r"has no val\.de\[\.gz\] nor val\.en\[\.gz\]"):
        multi30k_files(tmp_path, "valid", "de", "en")


def test_multi30k_folder_with_only_the_test_files(tmp_path: Path) -> None:
    """The layout of data/task1/raw in the multi30k/dataset repository, test files only."""
    for lang, lines in (("de", ["Ein Hund.", "Zwei Katzen."]), ("en", ["A dog.", "Two cats."])):
        with gzip.open(tmp_path / f"test_2016_flickr.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    corpus = read_corpus(f"multi30k:{tmp_path}")
    assert list(corpus.splits) == ["test"]
    assert corpus.splits["test"].src == ["Ein Hund.", "Zwei Katzen."]
    assert corpus.splits["test"].tgt == ["A dog.", "Two cats."]
    assert multi30k_test_missing(f"multi30k:{tmp_path}") is None
    assert multi30k_test_missing(f"multi30k:{tmp_path}:en-fr") is not None


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k not found at {MULTI30K}")
def test_multi30k_reader_counts() -> None:
    corpus = read_corpus(f"multi30k:{MULTI30K}")
    sizes = {name: len(text) for name, text in corpus.splits.items()}
    assert sizes == {"train": 29000, "valid": 1014, "test": 1000}
    assert corpus.splits["train"].src[0].startswith("Zwei junge weiße Männer")
    reverse = read_corpus(f"multi30k:{MULTI30K}:en-de")
    assert reverse.splits["test"].tgt == corpus.splits["test"].src
