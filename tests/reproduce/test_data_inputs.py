"""The data stage of `gmlm reproduce` keeps the times of the files it read, and a later run
stops when they now make another dataset (the stages that read it would be left as they were),
but not when a file was only touched."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from gmlm.data import load_dataset
from gmlm.data.bible import verses_path
from gmlm.data.corpora import corpus_files
from gmlm.errors import GmlmError
from gmlm.reproduce.config import load_reproduce_config
from gmlm.reproduce.data_inputs import check_data_inputs, data_files, file_signature
from gmlm.reproduce.pipeline import run_reproduce
from gmlm.reproduce.stage_record import INPUTS, StageRecord
from tests.helpers.corpora import make_pairs, write_corpus, write_lines
from tests.helpers.reproduce_runs import synthetic_data


def _later(path: Path) -> None:
    """Move `path`'s modification time a minute on, its content as it was."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 60 * 10**9))


def test_a_touched_corpus_changes_nothing_and_a_changed_one_is_prepared_again(
    tmp_path: Path,
) -> None:
    src, tgt = make_pairs(300, seed=5)
    corpus = write_corpus(tmp_path, src, tgt)
    files = [tmp_path / "c.de", tmp_path / "c.en"]
    cfg = load_reproduce_config("smoke", synthetic_data(corpus))
    out = tmp_path / "run"
    record_path = out / "stages" / "data.json"
    run_reproduce(cfg, out, ("data",), progress=False, log=print)
    record = StageRecord.read(record_path)
    assert record.inputs == file_signature(files)
    assert record.inputs is not None and len(record.inputs) == 2

    messages: list[str] = []
    _later(tmp_path / "c.en")  # touched: the same pairs, so nothing to redo
    run_reproduce(cfg, out, ("data",), progress=False, log=messages.append)
    assert any("touched since it ran, but make the same dataset" in m for m in messages)
    assert "[data] done already" in messages[-1]
    assert StageRecord.read(record_path).inputs == file_signature(files)
    messages.clear()
    run_reproduce(cfg, out, ("data",), progress=False, log=messages.append)
    assert messages == [messages[0]] and "[data] done already" in messages[0]

    # Other pairs, and no model trained on the old ones: prepared again by itself.
    before = load_dataset(out / "data").content_hash
    write_lines(tmp_path / "c.de", [*src[:-1], "der Hund läuft über die Straße."])
    _later(tmp_path / "c.de")  # seen as changed on any file system's clock
    messages.clear()
    run_reproduce(cfg, out, ("data",), progress=False, log=messages.append)
    why = "[data] its corpus or tokenizer changed since it ran (no model trained on it)"
    assert f"{why}: redoing data" in messages
    assert StageRecord.read(record_path).inputs == file_signature(files)
    assert load_dataset(out / "data").content_hash not in (before, "")


def test_a_changed_corpus_a_model_learned_from_stops_the_run(tmp_path: Path) -> None:
    src, tgt = make_pairs(300, seed=7)
    corpus = write_corpus(tmp_path, src, tgt)
    more = ["distill.enabled=false", "ar.overrides=[max_steps=4,valid_every=4,valid_sentences=0]"]
    cfg = load_reproduce_config("smoke", [*synthetic_data(corpus), *more])
    out = tmp_path / "run"
    run_reproduce(cfg, out, ("data", "teacher", "distill", "ar"), progress=False, log=print)
    records = {p.name: p.read_bytes() for p in (out / "stages").iterdir()}
    assert set(records) == {"data.json", "teacher.json", "distill.json", "ar.json"}

    # Every run is refused, --redo data included (the training could not resume on the new
    # pairs), whichever --stages it names, before anything is touched.
    write_lines(tmp_path / "c.en", [*tgt[:-1], "The dog runs."])
    _later(tmp_path / "c.en")
    for only, redo in ((("data",), ()), (("ar",), ()), (("report",), ()), (("data",), ("data",))):
        with pytest.raises(GmlmError, match=r"changed since the data stage .*and ar learned from"):
            run_reproduce(cfg, out, only, redo=redo, progress=False, log=print)
        assert {p.name: p.read_bytes() for p in (out / "stages").iterdir()} == records
    # Put back as it was, the run goes on.
    write_lines(tmp_path / "c.en", tgt)
    messages: list[str] = []
    run_reproduce(
        cfg, out, ("data", "teacher", "distill", "ar"), progress=False, log=messages.append
    )
    assert sum("done already" in m for m in messages) == 4


def test_a_record_from_before_the_times_were_kept_gets_them(tmp_path: Path) -> None:
    src, tgt = make_pairs(300, seed=6)
    corpus = write_corpus(tmp_path, src, tgt)
    cfg = load_reproduce_config("smoke", synthetic_data(corpus))
    out = tmp_path / "run"
    run_reproduce(cfg, out, ("data",), progress=False, log=print)
    path = out / "stages" / "data.json"
    record = StageRecord.read(path)
    old = {k: v for k, v in record.summary.items() if k != INPUTS}
    dataclasses.replace(record, summary=old).write(path)
    messages: list[str] = []
    run_reproduce(cfg, out, ("data",), progress=False, log=messages.append)
    assert messages == [messages[0]] and "[data] done already" in messages[0]
    assert StageRecord.read(path).inputs == record.inputs

    # A corpus that cannot be read any more leaves the prepared dataset as what was read.
    (tmp_path / "c.de").unlink()
    messages.clear()
    run_reproduce(cfg, out, ("data",), progress=False, log=messages.append)
    assert "[data] cannot check its corpus against the prepared dataset" in messages[0]


def test_the_files_each_corpus_kind_reads(tmp_path: Path) -> None:
    folder = tmp_path / "m30k"
    names = [
        f"{prefix}.{lang}{gz}"
        for prefix in ("train", "val", "test_2016_flickr")
        for lang in ("en", "de")
        for gz in (".gz", "")
    ]
    assert corpus_files(f"multi30k:{folder}:en-de") == [folder / name for name in names]
    given = corpus_files("files:a.de,b.en", valid="tsv:v.tsv", test="jsonl:t.jsonl:de,en")
    assert given == [Path("a.de"), Path("b.en"), Path("v.tsv"), Path("t.jsonl")]
    assert corpus_files(f"hf:{tmp_path}:de-en") == [tmp_path]
    assert corpus_files(f"hf:{tmp_path / 'wmt14'}:de-en") is None  # a hub name
    assert corpus_files("bible:de-en") == [verses_path("de"), verses_path("en")]

    # The tokenizer's folder joins them, its hidden files (a lock) left out.
    tok = tmp_path / "tok"
    tok.mkdir()
    write_lines(tok / "spm.model", ["x"])
    write_lines(tok / ".gmlm.lock", ["pid"])
    cfg = load_reproduce_config(
        "smoke", [f"data.corpus=files:{tmp_path / 'a'},{tmp_path / 'b'}", f"data.tokenizer={tok}"]
    )
    files = data_files(cfg)
    assert files == [tmp_path / "a", tmp_path / "b", tok]
    model = tok / "spm.model"
    assert file_signature(files) == {
        str(tmp_path / "a"): None,
        str(tmp_path / "b"): None,
        str(model): [model.stat().st_size, model.stat().st_mtime_ns],
    }


def test_nothing_is_read_before_the_data_stage_has_run(tmp_path: Path) -> None:
    """A run that has not prepared its data (e.g. `--stages theory`) is not held up by its
    corpus, not even a mistyped one: the data stage names that when it runs."""
    cfg = load_reproduce_config("smoke", ["data.corpus=nope:x"])
    assert check_data_inputs(cfg, tmp_path, print) is False
    with pytest.raises(GmlmError, match="unknown corpus spec 'nope:x'"):
        data_files(cfg)
