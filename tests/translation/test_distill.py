"""Sequence-level distillation: outputs, resume after a crash, reuse, and errors."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import gmlm
from gmlm.cli.flags import show
from gmlm.cli.main import main
from gmlm.data import load_dataset
from gmlm.data.cleaning import normalize
from gmlm.data.prepare import prepare_dataset
from gmlm.errors import GmlmError
from gmlm.translation.distill import distill
from gmlm.translation.distill_record import DistillRecord
from gmlm.translation.distill_settings import CHUNK_SENTENCES, DistillSettings
from gmlm.translation.translator import Translator
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.corpora import make_pairs, tiny_config, write_lines

BEAM = 3
CHOSEN = DistillSettings(beam=BEAM, precision="fp32", chunk_sentences=50)
SETTINGS: dict[str, Any] = dict(settings=CHOSEN, batch_size=16, progress=False, log=None)
LONG = " ".join(["Hund"] * 80) + "."  # longer than the teacher's max_source_len=64


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    # Module scope: set before the module fixtures translate. Tiny models on a busy machine
    # are many times slower with more threads.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 training pairs (one with an empty source, one too long for the teacher) and
    explicit valid/test files."""
    root = tmp_path_factory.mktemp("distill-data")
    src, tgt = make_pairs(240, seed=3)
    src[5], src[17] = "", LONG
    splits = {"train": (src[:200], tgt[:200]), "valid": (src[200:220], tgt[200:220])}
    splits["test"] = (src[220:], tgt[220:])
    for name, (s, t) in splits.items():
        write_lines(root / f"{name}.de", s)
        write_lines(root / f"{name}.en", t)
    spec = {name: f"files:{root / name}.de,{root / name}.en" for name in splits}
    cfg = tiny_config(spec["train"], valid=spec["valid"], test=spec["test"])
    cfg.filter.max_ratio = 0  # the untrained teacher writes long outputs; keep them all
    return prepare_dataset(cfg, root / "data")


@pytest.fixture(scope="module")
def teacher(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("teacher") / "ckpt"
    return write_checkpoint(folder, "ar", load_dataset(data).tokenizer)


@pytest.fixture(scope="module")
def reference(data: Path, teacher: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete, uninterrupted distillation."""
    return distill(teacher, data, tmp_path_factory.mktemp("ref") / "out", **SETTINGS)


def teacher_outputs(teacher: Path, sources: list[str]) -> list[str]:
    translator = gmlm.load(teacher, device="cpu")
    fits = [bool(s) and s != LONG for s in sources]
    outputs = translator.translate(
        [s for s, ok in zip(sources, fits, strict=True) if ok], beam=BEAM
    )
    it = iter(outputs)
    return [normalize(next(it)) if ok else "" for ok in fits]


def test_train_targets_are_the_teacher_beam_outputs(
    data: Path, teacher: Path, reference: Path
) -> None:
    original, distilled = load_dataset(data), load_dataset(reference)
    sources = original.read_text("train", "src")
    assert distilled.read_text("train", "src") == sources
    expected = teacher_outputs(teacher, sources)
    assert distilled.read_text("train", "tgt") == expected
    assert expected != original.read_text("train", "tgt") and sum(map(bool, expected)) == 198
    # Binarized training targets are the outputs encoded with the same tokenizer.
    train = distilled.split("train")
    row = 3
    line = int(train.lines[row])
    assert list(train[row][1]) == original.tokenizer.encode(expected[line])


def test_valid_test_and_tokenizer_are_the_originals(data: Path, reference: Path) -> None:
    for name in ("valid", "test"):
        for suffix in ("src.txt", "tgt.txt", "src.bin", "tgt.bin", "idx.npy"):
            original = (data / f"{name}.{suffix}").read_bytes()
            assert (reference / f"{name}.{suffix}").read_bytes() == original, f"{name}.{suffix}"
    assert (reference / "tokenizer.model").read_bytes() == (data / "tokenizer.model").read_bytes()
    assert load_dataset(reference).tokenizer == load_dataset(data).tokenizer


def test_distill_json_records_teacher_settings_and_counts(teacher: Path, reference: Path) -> None:
    record = json.loads((reference / "distill.json").read_text(encoding="utf-8"))
    assert record["teacher"] == str(teacher.resolve()) and record["teacher_step"] == 123
    assert record["beam"] == BEAM and record["precision"] == "fp32"
    counts = record["counts"]
    assert counts["train_sources"] == 200
    assert (counts["translated"], counts["empty_sources"], counts["over_length_sources"]) == (
        198,
        1,
        1,
    )
    kept = load_dataset(reference).manifest["splits"]["train"]["rows"]
    dropped = record["counts"]["train_pairs_dropped"]
    assert counts["train_pairs_kept"] == kept == 200 - sum(dropped.values())
    assert dropped["empty"] == 2  # the empty source, and the untranslated over-long one
    assert record["chunks"] == 4 and record["timed_sentences"] == 198  # both processes' times
    assert (record["sentences_this_run"], record["chunks_resumed"]) == (198, 0)
    assert record["sentences_per_s"] > 0
    assert not (reference / "work").exists()


def test_distill_json_is_a_typed_record_with_the_keys_of_its_format(
    reference: Path, tmp_path: Path
) -> None:
    """distill.json reads as a DistillRecord (its keys in this order, as every earlier
    version wrote them) and writes back byte for byte; its settings decide reuse."""
    path = reference / "distill.json"
    record = DistillRecord.read(path)
    assert list(json.loads(path.read_text(encoding="utf-8"))) == [
        "settings", "teacher", "teacher_step", "data", "beam", "precision", "batch_size",
        "max_tokens", "threads", "device", "torch", "gmlm", "cpu", "counts", "chunks",
        "chunks_resumed", "sentences_this_run", "seconds_this_run", "teacher_seconds",
        "timed_sentences", "sentences_per_s", "build_seconds", "created_utc",
    ]  # fmt: skip
    assert record.counts.translated == 198 and record.timing.rate.timed_sentences == 198
    record.write(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()
    assert DistillRecord.recorded_settings(path) == record.settings
    (tmp_path / "old.json").write_text(json.dumps({"settings": record.settings, "x": 1}))
    assert DistillRecord.recorded_settings(tmp_path / "old.json") == record.settings
    assert DistillRecord.recorded_settings(tmp_path / "missing.json") is None


class Crash(Exception):
    pass


def count_calls(monkeypatch: pytest.MonkeyPatch, crash_after: int | None = None) -> list[int]:
    """Count Translator.translate calls (their batch sizes); raise Crash on call number
    `crash_after` + 1."""
    calls: list[int] = []
    original = Translator.translate

    def spy(self: Translator, sentences: list[str], **kwargs: Any) -> list[str]:
        if crash_after is not None and len(calls) == crash_after:
            raise Crash
        calls.append(len(sentences))
        return original(self, sentences, **kwargs)

    monkeypatch.setattr(Translator, "translate", spy)
    return calls


def test_interrupted_run_resumes_to_identical_output(
    data: Path, teacher: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    # Chunks hold 50 sentences = batches of 16, 16, 16, 2: crash inside the second chunk.
    count_calls(monkeypatch, crash_after=6)
    with pytest.raises(Crash):
        distill(teacher, data, out, **SETTINGS)
    with pytest.raises(GmlmError, match="not a prepared dataset"):
        load_dataset(out)  # nothing a later run would trust
    assert sorted(p.name for p in (out / "work").glob("chunk-*")) == ["chunk-00000.txt"]
    (out / "work" / ".chunk-00001.txt.x1y2.tmp").write_text("half a chunk\n")  # kill -9
    monkeypatch.undo()
    calls = count_calls(monkeypatch)
    messages: list[str] = []
    distill(teacher, data, out, **{**SETTINGS, "log": messages.append})
    assert sum(calls) == 198 - 50  # only the unfinished chunks are translated again
    assert any("resuming: 1 of 4 chunks" in m for m in messages)
    for name in ("train.src.txt", "train.tgt.txt", "train.tgt.bin", "train.idx.npy"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    record = json.loads((out / "distill.json").read_text(encoding="utf-8"))
    assert record["chunks_resumed"] == 1 and record["sentences_this_run"] == 148
    assert record["timed_sentences"] == 198  # the first run's chunk time was kept
    assert not list(out.glob("work")) and not list(out.glob(".*"))


def test_chunks_from_other_settings_are_discarded(
    data: Path, teacher: Path, reference: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    work = out / "work"
    work.mkdir(parents=True)
    (work / "settings.json").write_text('{"beam": 7}\n')
    (work / "chunk-00000.txt").write_text("stale\n" * 50)
    messages: list[str] = []
    distill(teacher, data, out, **{**SETTINGS, "log": messages.append})
    assert (out / "train.tgt.txt").read_bytes() == (reference / "train.tgt.txt").read_bytes()
    assert any("other settings" in m for m in messages)


def test_complete_output_is_reused_unless_settings_change(
    data: Path, teacher: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    shutil.copytree(reference, out)
    calls = count_calls(monkeypatch)
    messages: list[str] = []
    assert distill(teacher, data, out, **{**SETTINGS, "log": messages.append}) == out
    assert calls == [] and "reusing it" in messages[-1]
    distill(teacher, data, out, **{**SETTINGS, "settings": dataclasses.replace(CHOSEN, beam=2)})
    assert sum(calls) == 198
    assert json.loads((out / "distill.json").read_text(encoding="utf-8"))["beam"] == 2


def test_wrong_teacher_kind_and_bad_out_are_clean_errors(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    padir = write_checkpoint(tmp_path / "padir", "padir", load_dataset(data).tokenizer)
    with pytest.raises(GmlmError, match=r"padir checkpoint.*must be an autoregressive.*'ar'"):
        distill(padir, data, tmp_path / "out", **SETTINGS)
    args = ["distill", "--teacher", str(padir), "--data", str(data), "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    assert "kind 'ar'" in capsys.readouterr().err
    assert main([*args, "--out", str(data)]) == 2
    assert "is the --data folder" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("keep me\n")
    assert main([*args, "--out", str(other)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (other / "notes.txt").read_text() == "keep me\n"


def test_cli_writes_the_same_dataset(
    data: Path, teacher: Path, reference: Path, tmp_path: Path
) -> None:
    # by sentence count, and by a token budget (beams x source length): the same dataset
    flags = ["--beam", str(BEAM), "--precision", "fp32", "--threads", "1", "--no-progress"]
    for batching, recorded in (
        (["--batch-size", "32"], {"batch_size": 32, "max_tokens": None}),
        (["--max-tokens", "200"], {"batch_size": None, "max_tokens": 200}),
    ):
        out = tmp_path / batching[0].strip("-")
        args = ["--teacher", str(teacher), "--data", str(data), "--out", str(out)]
        assert main(["distill", *args, *flags, *batching]) == 0
        assert (out / "train.tgt.txt").read_bytes() == (reference / "train.tgt.txt").read_bytes()
        record = json.loads((out / "distill.json").read_text(encoding="utf-8"))
        assert {key: record[key] for key in recorded} == recorded


def test_torchrun_processes_share_the_chunks_and_write_the_one_process_dataset(
    data: Path, teacher: Path, reference: Path, tmp_path: Path
) -> None:
    """Two CPU processes (gloo) each translate every other chunk of 50 sentences; rank 0 builds
    the dataset: the files equal the one-process distillation's, byte for byte."""
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "gmlm", "distill", "--teacher", str(teacher), "--data", str(data), "--out",
        str(out), "--beam", str(BEAM), "--batch-size", "16", "--precision", "fp32",
        "--threads", "1", "--chunk-sentences", "50", "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("train.src.txt", "train.tgt.txt", "train.tgt.bin", "train.idx.npy"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    record = json.loads((out / "distill.json").read_text(encoding="utf-8"))
    assert record["chunks"] == 4 and record["timed_sentences"] == 198  # both processes' times
    assert (record["sentences_this_run"], record["chunks_resumed"]) == (198, 0)
    assert not list(out.glob("work")) and not list(out.glob(".*"))
    assert "2 processes" in done.stdout + done.stderr


def test_under_torchrun_a_held_folder_stops_every_process(
    data: Path, teacher: Path, tmp_path: Path
) -> None:
    """Another command holds --out: rank 0 cannot lock it and says so; rank 1, which would
    have waited for rank 0 forever, ends too, saying that another process failed."""
    import os
    import subprocess
    import sys

    from gmlm.locking import folder_lock

    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "gmlm", "distill", "--teacher", str(teacher), "--data", str(data), "--out",
        str(out), "--beam", str(BEAM), "--precision", "fp32", "--threads", "1",
        "--no-progress",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with folder_lock(out, "the test"):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    assert "1 other process(es) of this torchrun job failed" in done.stderr
    assert done.stderr.count("gmlm: error:") == 2 and not (out / "work").exists()


def test_help_gives_the_chunk_size_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["distill", "--help"])
    assert exit_info.value.code == 0
    assert f"(default: {show(CHUNK_SENTENCES)})" in " ".join(capsys.readouterr().out.split())
