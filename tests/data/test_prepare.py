import json
import os
import shutil
from pathlib import Path

import pytest

from gmlm.config import load_saved_config, merge
from gmlm.data import binarized
from gmlm.data.binarized import DATASET_FILES, load_dataset
from gmlm.data.cleaning import normalize
from gmlm.data.prepare import DataConfig, prepare_dataset
from gmlm.data.stats import DatasetStats
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from tests.helpers.corpora import make_pairs, tiny_config, write_lines


def files_spec(tmp_path: Path, src: list[str], tgt: list[str], name: str = "c") -> str:
    s = write_lines(tmp_path / f"{name}.de", src)
    t = write_lines(tmp_path / f"{name}.en", tgt)
    return f"files:{s},{t}"


def test_dataset_contents_round_trip(tiny_dataset: Path) -> None:
    prepared = load_dataset(tiny_dataset)
    assert prepared.splits == ["train", "valid", "test"]
    assert (prepared.manifest["src_lang"], prepared.manifest["tgt_lang"]) == ("de", "en")
    tok = prepared.tokenizer
    stats = prepared.stats()
    for split in prepared.splits:
        ds = prepared.split(split)
        src_text = prepared.read_text(split, "src")
        tgt_text = prepared.read_text(split, "tgt")
        assert len(src_text) == stats.splits[split].pairs
        assert len(ds) == stats.splits[split].kept
        for i in range(0, len(ds), 37):  # ids decode back to the text line they came from
            src_ids, tgt_ids = ds[i]
            assert tok.decode(src_ids) == src_text[ds.lines[i]]
            assert tok.decode(tgt_ids) == tgt_text[ds.lines[i]]
    total = sum(s.pairs for s in stats.splits.values())
    assert total == 2000
    assert stats.splits["train"].src_tokens == int(prepared.split("train").src_lengths.sum())
    cfg = load_saved_config(DataConfig, tiny_dataset / "config.yaml")
    assert cfg.tokenizer.vocab_size == 400 and cfg.filter.max_len == 64
    assert "carved" in " ".join(stats.notes)


def test_filtering_reported_and_text_kept(tmp_path: Path) -> None:
    src, tgt = make_pairs(300)
    src += ["", "Hund " * 80, "Hund", "   "]
    tgt += ["empty source", "dog", "the dog runs over the big tree and the small cat quickly", "x"]
    cfg = tiny_config(files_spec(tmp_path, src, tgt), valid_fraction=0.0, test_fraction=0.0)
    root = prepare_dataset(cfg, tmp_path / "out")
    train = load_dataset(root).stats().splits["train"]
    assert train.pairs == 304
    assert train.dropped == {"empty": 2, "too_long": 1, "length_ratio": 1}
    assert train.kept == 300
    text = load_dataset(root).read_text("train", "src")
    assert text[-3:] == [normalize("Hund " * 80), "Hund", ""]  # references keep every pair


def test_reuse_rebuild_and_force(tmp_path: Path) -> None:
    src, tgt = make_pairs(300)
    cfg = tiny_config(files_spec(tmp_path, src, tgt))
    out = tmp_path / "out"
    messages: list[str] = []
    prepare_dataset(cfg, out, log=messages.append)
    first = load_dataset(out).manifest
    prepare_dataset(cfg, out, log=messages.append)
    assert "up to date" in messages[-1]
    assert load_dataset(out).manifest["created_utc"] == first["created_utc"]
    # The same text in another file is the same content: still reused.
    moved = tiny_config(files_spec(tmp_path, src, tgt, name="moved"))
    prepare_dataset(moved, out, log=messages.append)
    assert "up to date" in messages[-1]
    # Changed content or settings rebuild.
    src[5] = "eine ganz andere Zeile."
    prepare_dataset(tiny_config(files_spec(tmp_path, src, tgt)), out, log=messages.append)
    assert "written" in messages[-1]
    second = load_dataset(out).content_hash
    cfg.filter.max_len = 32
    prepare_dataset(cfg, out, log=messages.append)
    assert "written" in messages[-1] and load_dataset(out).content_hash != second
    prepare_dataset(cfg, out, log=messages.append, force=True)
    assert "written" in messages[-1]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_damaged_dataset_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    src, tgt = make_pairs(200)
    cfg = tiny_config(files_spec(tmp_path, src, tgt))
    out = prepare_dataset(cfg, tmp_path / "out")
    with (out / "train.tgt.bin").open("r+b") as handle:
        handle.truncate(10)
    with pytest.raises(GmlmError, match=r"train\.tgt\.bin: 10 bytes, the manifest expects"):
        load_dataset(out).split("train")
    messages: list[str] = []
    prepare_dataset(cfg, out, log=messages.append)
    assert "written" in messages[-1]
    assert len(load_dataset(out).split("train")) > 0


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01  # the size stays: only the digest tells
    path.write_bytes(bytes(data))


def _read_all(folder: Path) -> None:
    """What every command reading a dataset goes through: each split's rows, each text file,
    the tokenizer."""
    prepared = load_dataset(folder)
    for split in prepared.splits:
        prepared.split(split)
        prepared.read_text(split, "src")
        prepared.read_text(split, "tgt")
    assert prepared.tokenizer


@pytest.mark.parametrize(
    "name", [f"{s}.{n}" for s in ("train", "test") for n in binarized.SPLIT_FILES]
)
def test_a_split_file_changed_after_preparation_is_refused(
    name: str, tiny_dataset: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "data"
    shutil.copytree(tiny_dataset, copy)
    _read_all(copy)  # intact, it reads
    _flip_last_byte(copy / name)
    with pytest.raises(
        GmlmError,
        match=rf"^{copy / name}: its bytes \(sha256 [0-9a-f]{{12}}\.\.\.\) are not the "
        rf"[0-9a-f]{{12}}\.\.\. that {copy / 'manifest.json'} records: .*gmlm data prepare",
    ):
        _read_all(copy)


def test_a_tokenizer_copied_from_another_dataset_is_refused(
    tiny_dataset: Path, tmp_path: Path
) -> None:
    src, tgt = make_pairs(200)
    other = prepare_dataset(tiny_config(files_spec(tmp_path, src, tgt)), tmp_path / "other")
    copy = tmp_path / "data"
    shutil.copytree(tiny_dataset, copy)
    for name in ("tokenizer.model", "tokenizer.json"):  # both: the pair checks itself
        shutil.copy(other / name, copy / name)
    with pytest.raises(GmlmError, match=r"tokenizer\.model: its tokenizer \(sha256 .* copied"):
        _read_all(copy)


def test_a_dataset_without_digests_is_read_by_size_alone(
    tiny_dataset: Path, tmp_path: Path
) -> None:
    """A dataset prepared before the digests were recorded still reads."""
    copy = tmp_path / "data"
    shutil.copytree(tiny_dataset, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["tokenizer_sha256"]
    for entry in manifest["splits"].values():
        del entry["sha256"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    _flip_last_byte(copy / "test.tgt.txt")
    _read_all(copy)


def test_interrupted_preparation_leaves_nothing_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, tgt = make_pairs(200)
    cfg = tiny_config(files_spec(tmp_path, src, tgt))
    out = tmp_path / "out"
    calls = []

    def crash(*args: object, **kwargs: object) -> None:
        calls.append(args)
        if len(calls) == 3:  # after train src/tgt text, mid-way through the splits
            raise KeyboardInterrupt
        real_write_text(*args, **kwargs)  # type: ignore[arg-type]

    real_write_text = binarized.write_text
    monkeypatch.setattr("gmlm.data.prepare.write_text", crash)
    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(cfg, out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # An existing dataset survives a crashed rebuild untouched.
    monkeypatch.setattr("gmlm.data.prepare.write_text", real_write_text)
    prepare_dataset(cfg, out)
    before = load_dataset(out).manifest
    calls.clear()
    monkeypatch.setattr("gmlm.data.prepare.write_text", crash)
    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(cfg, out, force=True)
    assert load_dataset(out).manifest == before
    # A run killed outright leaves a hidden temp folder: never read, removed by the next run.
    stale = tmp_path / ".out.tmp-killed"
    stale.mkdir()
    (stale / "manifest.json").write_text("{}")
    monkeypatch.setattr("gmlm.data.prepare.write_text", real_write_text)
    prepare_dataset(cfg, out, force=True)
    assert not stale.exists()


def test_folder_without_manifest_is_not_a_dataset(tmp_path: Path) -> None:
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "train.src.bin").write_bytes(b"\0\0")
    with pytest.raises(GmlmError, match=r"not a prepared dataset .*no manifest\.json"):
        load_dataset(partial)
    src, tgt = make_pairs(50)
    with pytest.raises(GmlmError, match="not empty and is not a gmlm dataset; refusing"):
        prepare_dataset(tiny_config(files_spec(tmp_path, src, tgt)), partial)
    assert (partial / "train.src.bin").read_bytes() == b"\0\0"


def test_empty_corpus_after_filtering(tmp_path: Path) -> None:
    src = ["Hund " * 100, "", "Katze " * 90]
    tgt = ["dog", "nothing", "cat"]
    cfg = tiny_config(files_spec(tmp_path, src, tgt), valid_fraction=0.0, test_fraction=0.0)
    with pytest.raises(GmlmError, match=r"no training pairs left after filtering .*'empty': 1"):
        prepare_dataset(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    empty = tiny_config(files_spec(tmp_path, [], [], name="none"))
    with pytest.raises(GmlmError, match="training split is empty"):
        prepare_dataset(empty, tmp_path / "out")


def test_separate_splits_and_reused_tokenizer(tmp_path: Path, tiny_dataset: Path) -> None:
    src, tgt = make_pairs(200, seed=5)
    dev_src, dev_tgt = make_pairs(20, seed=6)
    dev = write_lines(
        tmp_path / "dev.tsv", [f"{s}\t{t}" for s, t in zip(dev_src, dev_tgt, strict=True)]
    )
    cfg = tiny_config(files_spec(tmp_path, src, tgt), valid=f"tsv:{dev}")
    cfg.tokenizer.path = str(tiny_dataset)
    cfg.tokenizer.vocab_size = 300  # not the reused tokenizer's size: said, not silent
    said: list[str] = []
    prepared = load_dataset(prepare_dataset(cfg, tmp_path / "out", log=said.append))
    assert prepared.tokenizer == Tokenizer.load(tiny_dataset)
    pieces = f"{prepared.tokenizer.vocab_size:,} pieces"
    assert (
        f"note: reusing the tokenizer of {tiny_dataset} ({pieces}); tokenizer.vocab_size=300 "
        "applies only to a tokenizer trained here" in said
    )
    assert prepared.read_text("valid", "tgt") == dev_tgt
    stats = prepared.stats().splits
    assert stats["train"].pairs + stats["test"].pairs == 200
    assert stats["valid"].pairs == 20


def test_a_test_set_alone_with_a_reused_tokenizer(tmp_path: Path, tiny_dataset: Path) -> None:
    """A corpus without a training split (a Multi30k folder holding only the test files) is
    encoded with a given tokenizer, split as it is; without one it is a clear error."""
    src, tgt = make_pairs(30, seed=7)
    folder = tmp_path / "raw"
    folder.mkdir()
    write_lines(folder / "test_2016_flickr.de", src)
    write_lines(folder / "test_2016_flickr.en", tgt)
    cfg = tiny_config(f"multi30k:{folder}")
    with pytest.raises(GmlmError, match=r"has no training split \(it has test\).*tokenizer"):
        prepare_dataset(cfg, tmp_path / "out")
    cfg.tokenizer.path = str(tiny_dataset)
    prepared = load_dataset(prepare_dataset(cfg, tmp_path / "out"))
    assert prepared.splits == ["test"]
    assert prepared.read_text("test", "src") == src and prepared.read_text("test", "tgt") == tgt
    tokenizer = Tokenizer.load(tiny_dataset)
    ds = prepared.split("test")
    assert [ds[i][0].tolist() for i in range(len(ds))] == [tokenizer.encode(s) for s in src]


def test_files_are_readable_by_others(tiny_dataset: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    for path in [tiny_dataset, *tiny_dataset.iterdir()]:
        assert path.stat().st_mode & 0o777 & ~umask & 0o044 == 0o044 & ~umask


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"tokenizer": {"vocab_size": 100}}, "vocab_size=100 is too small"),
        ({"filter": {"max_len": 1}}, "max_len must be at least 2"),
        ({"valid_fraction": 0.3, "test_fraction": 0.3}, "test_fraction must be < 0.5"),
        ({"valid_fraction": -0.1}, r"valid_fraction=-0.1 must be in \[0, 0.5\)"),
        ({"tokenizer": {"vocab_size": 10**9}}, "tokenizer.vocab_size=1000000000 must be"),
    ],
)
def test_invalid_settings(tmp_path: Path, override: dict, message: str) -> None:
    with pytest.raises(GmlmError, match=message):
        prepare_dataset(merge(tiny_config("tsv:unused.tsv"), override), tmp_path / "out")


def test_rebuild_replaces_only_what_prepare_wrote(tmp_path: Path) -> None:
    src, tgt = make_pairs(200)
    cfg = tiny_config(files_spec(tmp_path, src, tgt))
    out = prepare_dataset(cfg, tmp_path / "out")
    assert {p.name for p in out.iterdir()} == DATASET_FILES  # the list knows every file
    (out / "notes.txt").write_text("mine")
    (out / "plots").mkdir()
    (out / "plots" / "lengths.csv").write_text("1,2\n")
    (out / "link").symlink_to("notes.txt")
    messages: list[str] = []
    prepare_dataset(cfg, out, force=True, log=messages.append)
    assert "kept what prepare did not write: link, notes.txt, plots" in messages[-1]
    # Without a test split now: its old files go, the user's files stay.
    cfg.test_fraction = 0.0
    prepare_dataset(cfg, out)
    assert load_dataset(out).splits == ["train", "valid"]
    assert not list(out.glob("test.*"))
    assert (out / "notes.txt").read_text() == "mine"
    assert (out / "plots" / "lengths.csv").read_text() == "1,2\n"
    assert os.readlink(out / "link") == "notes.txt"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_killed_between_the_two_renames_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, tgt = make_pairs(200)
    cfg = tiny_config(files_spec(tmp_path, src, tgt))
    out = prepare_dataset(cfg, tmp_path / "out")
    (out / "notes.txt").write_text("mine")
    before = load_dataset(out).manifest

    def killed(tmp: Path, target: Path) -> None:  # replace_dir's first rename, then kill -9
        old = tmp_path / f".{target.name}.old-killed"
        old.mkdir()
        target.rename(old / target.name)
        raise KeyboardInterrupt

    monkeypatch.setattr("gmlm.data.prepare.replace_dir", killed)
    with pytest.raises(KeyboardInterrupt):
        prepare_dataset(cfg, out, force=True)
    assert not out.exists()
    monkeypatch.undo()
    messages: list[str] = []
    prepare_dataset(cfg, out, log=messages.append)
    assert "up to date" in messages[-1] and load_dataset(out).manifest == before
    assert (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_file_that_cannot_be_kept_stops_the_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, tgt = make_pairs(200)
    cfg = tiny_config(files_spec(tmp_path, src, tgt))
    out = prepare_dataset(cfg, tmp_path / "out")
    (out / "notes.txt").write_text("mine")
    before = load_dataset(out).manifest

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "link", refuse)
    monkeypatch.setattr(shutil, "copy2", refuse)
    with pytest.raises(GmlmError, match=r"cannot keep notes\.txt.*nothing was replaced: move"):
        prepare_dataset(cfg, out, force=True)
    assert load_dataset(out).manifest == before and (out / "notes.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_stats_json_is_a_typed_record_that_rewrites_byte_for_byte(
    tiny_dataset: Path, tmp_path: Path
) -> None:
    """stats.json reads as a DatasetStats (keys in the order every version wrote them) and
    writes back byte for byte, so earlier datasets read as they are."""
    path = tiny_dataset / "stats.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data) == [
        "corpus", "src_lang", "tgt_lang", "max_len", "tokenizer", "splits", "notes", "seconds"
    ]  # fmt: skip
    assert list(data["splits"]["train"]) == [
        "pairs", "kept", "dropped", "src_tokens", "tgt_tokens", "unk_tokens", "src_length",
        "tgt_length",
    ]  # fmt: skip
    assert list(data["splits"]["train"]["src_length"]) == [
        "mean",
        "p50",
        "p90",
        "p95",
        "p99",
        "max",
    ]
    stats = DatasetStats.read(path)
    assert stats == load_dataset(tiny_dataset).stats()
    stats.write(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()
