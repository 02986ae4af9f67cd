"""`gmlm translate` in chunks, resumable, and shared between torchrun processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gmlm.checkpoint.files import fill_inference_files, write_checkpoint_dir
from gmlm.cli.main import main
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.models import build_model
from gmlm.nn import ModelConfig
from gmlm.training.config import TrainConfig
from gmlm.translation.shard_settings import ShardSettings
from gmlm.translation.sharded import translate_file, work_folder
from gmlm.translation.translator import Translator
from tests.helpers.sentences import sentences

LINES = [*sentences(9, seed=21), "", *sentences(4, seed=22)]  # 14 lines, one empty
CHUNKS = ShardSettings(chunk_lines=4)  # 4 chunks: 4 + 4 + 4 + 2 lines


@pytest.fixture(scope="module")
def checkpoint(
    tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer, text_config: ModelConfig
) -> Path:
    """An untrained PaDIR model saved as a checkpoint folder (random outputs differ by seed
    key, so a line translated with another line's key would show)."""
    torch.manual_seed(0)
    model = build_model("padir", text_config)
    folder = tmp_path_factory.mktemp("sharded") / "padir"
    cfg = TrainConfig(kind="padir", model=text_config)
    write_checkpoint_dir(
        folder, lambda tmp: fill_inference_files(tmp, model, cfg, tokenizer, {"step": 0})
    )
    return folder


@pytest.fixture(scope="module")
def expected(checkpoint: Path) -> list[str]:
    """The whole input in one call, as `gmlm translate` without torchrun does it."""
    from gmlm.translation.translator import load

    return load(checkpoint, device="cpu").translate(LINES, steps=2, seed=3)


def run(checkpoint: Path, output: Path, said: list[str] | None = None) -> None:
    translate_file(
        checkpoint,
        LINES,
        output,
        origin="in.de",
        sharding=CHUNKS,
        device="cpu",
        say=(said if said is not None else []).append,
        steps=2,
        seed=3,
    )


def test_chunks_give_the_whole_files_translation(
    checkpoint: Path, expected: list[str], tmp_path: Path
) -> None:
    output = tmp_path / "out.en"
    said: list[str] = []
    run(checkpoint, output, said)
    assert output.read_text(encoding="utf-8") == "".join(line + "\n" for line in expected)
    assert not work_folder(output).exists() and sorted(tmp_path.iterdir()) == [output]
    assert "14 lines of in.de in 4 chunks of up to 4 lines" in said[-1]
    assert len(set(expected)) > 10  # the lines' outputs differ: a mixed-up order would show


def test_an_interrupted_run_resumes_from_its_saved_chunks(
    checkpoint: Path, expected: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = Translator.translate

    def failing_third(self: Translator, *args: object, **kwargs: object) -> list[str]:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # e.g. Ctrl-C during the third chunk
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Translator, "translate", failing_third)
    output = tmp_path / "out.en"
    with pytest.raises(KeyboardInterrupt):
        run(checkpoint, output)
    assert not output.exists()
    saved = sorted(p.name for p in work_folder(output).glob("chunk-*.txt"))
    assert saved == ["chunk-00000.txt", "chunk-00001.txt"]
    calls.clear()
    said: list[str] = []
    run(checkpoint, output, said)
    assert len(calls) == 2  # only the two chunks not saved
    assert "resuming: 2 of 4 chunks saved" in said[-1]
    assert output.read_text(encoding="utf-8") == "".join(line + "\n" for line in expected)
    assert not work_folder(output).exists()


def test_chunks_of_other_settings_are_discarded(
    checkpoint: Path, expected: list[str], tmp_path: Path
) -> None:
    output = tmp_path / "out.en"
    work = work_folder(output)
    work.mkdir()
    (work / "settings.json").write_text('{"format_version": 1, "seed": 99}', encoding="utf-8")
    (work / "chunk-00000.txt").write_text("wrong\n" * 4, encoding="utf-8")
    said: list[str] = []
    run(checkpoint, output, said)
    assert any("1 chunk(s) of an earlier run with other settings" in s for s in said)
    assert output.read_text(encoding="utf-8") == "".join(line + "\n" for line in expected)


def test_a_folder_that_is_not_ours_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.en"
    work_folder(output).mkdir()
    (work_folder(output) / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(GmlmError, match="is not empty and is not the saved chunks"):
        run(checkpoint, output)
    assert (work_folder(output) / "notes.txt").read_text(encoding="utf-8") == "mine"
    assert not output.exists()


def test_torchrun_without_output_is_a_clean_error(
    checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "in.de"
    source.write_text("der Hund.\n", encoding="utf-8")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["translate", "--checkpoint", str(checkpoint), "--input", str(source)]) == 2
    assert "under torchrun, give --output FILE" in capsys.readouterr().err


def test_two_torchrun_processes_write_the_one_process_output(
    checkpoint: Path, expected: list[str], tmp_path: Path
) -> None:
    """Two CPU processes (gloo) each translate every other chunk; rank 0 merges: the file is
    the one-process output, byte for byte."""
    source = tmp_path / "in.de"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    output = tmp_path / "out.en"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "gmlm", "translate", "--checkpoint", str(checkpoint), "--input", str(source),
        "--output", str(output), "--steps", "2", "--seed", "3", "--chunk-lines", "4",
        "--device", "cpu", "--timing",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert output.read_bytes() == "".join(line + "\n" for line in expected).encode("utf-8")
    assert sorted(tmp_path.iterdir()) == [source, output]
    assert "4 chunks of up to 4 lines, 2 processes" in done.stderr
    assert "translated 14 lines in" in done.stderr and "2 processes, 0 lines resumed" in done.stderr


def test_a_process_that_fails_stops_the_others(checkpoint: Path, tmp_path: Path) -> None:
    """Rank 0 cannot take the chunks folder (it holds someone else's file): both processes
    end at once with a message, rank 1 saying that another process failed, none waits."""
    source = tmp_path / "in.de"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    output = tmp_path / "out.en"
    work_folder(output).mkdir()
    (work_folder(output) / "notes.txt").write_text("mine", encoding="utf-8")
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "gmlm", "translate", "--checkpoint", str(checkpoint), "--input", str(source),
        "--output", str(output), "--chunk-lines", "4", "--device", "cpu",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0
    assert "is not empty and is not the saved chunks" in done.stderr
    assert "1 other process(es) of this torchrun job failed" in done.stderr
    assert done.stderr.count("gmlm: error:") == 2  # one clean line per process (torchrun's
    assert not output.exists()  # own report of a failed child follows them)
