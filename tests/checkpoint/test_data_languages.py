"""A checkpoint is never run on a prepared dataset of another language pair: every command
that pairs the two refuses it before any work, the same way (one table), and writes nothing.
Where either side records no pair, nothing is checked (the analyses run as before)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gmlm.cli.main import main

# Each command's arguments: {ar} and {padir} checkpoints, {data} the dataset, {tmp} a folder.
COMMANDS = {
    "analyze attention": "analyze attention --checkpoint {padir} --data {data} --sentences 2",
    "analyze length": "analyze length --checkpoint {padir} --data {data} --sentences 2",
    "analyze ablation": "analyze ablation --checkpoint {padir} --data {data} --sentences 2 "
    "--variant steps=2",
    "analyze calibrate": "analyze calibrate --checkpoint {padir} --data {data} --sentences 2",
    "bench --ar": "bench --ar {ar} --padir {padir_ok} --data {data} --sentences 2 "
    "--batch-sizes 1 --steps 1 --length-beams 1 --warmup 1 --threads 1 --precision fp32",
    "bench --padir": "bench --ar {ar_ok} --padir {padir} --data {data} --sentences 2 "
    "--batch-sizes 1 --steps 1 --length-beams 1 --warmup 1 --threads 1 --precision fp32",
    "distill --teacher": "distill --teacher {ar} --data {data} --out {tmp}/distilled",
}


def _relabelled(checkpoint: Path, folder: Path, pair: tuple[str, str]) -> Path:
    """A copy of `checkpoint` whose meta.json says it translates `pair`."""
    shutil.copytree(checkpoint, folder)
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    meta["src_lang"], meta["tgt_lang"] = pair
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_checkpoint_of_another_pair_is_refused_on_a_dataset(
    command: str,
    learned_checkpoints: dict[str, Path],
    word_task_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    manifest = json.loads((word_task_data / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["src_lang"], manifest["tgt_lang"]) == ("de", "en")
    folders = {
        kind: _relabelled(learned_checkpoints[kind], tmp_path / kind, ("en", "de"))
        for kind in ("ar", "padir")
    }
    before = {kind: _files(folder) for kind, folder in folders.items()}
    argv = COMMANDS[command].format(
        ar=folders["ar"],
        padir=folders["padir"],
        ar_ok=learned_checkpoints["ar"],
        padir_ok=learned_checkpoints["padir"],
        data=word_task_data,
        tmp=tmp_path,
    )
    status = main([*argv.split(), "--no-progress"] if "analyze" in command else argv.split())
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    wrong = folders["padir" if "padir" in command or "analyze" in command else "ar"]
    assert err.startswith(
        f"gmlm: error: {wrong} translates en-de (its meta.json says so), but the dataset "
        f"{word_task_data} holds de-en pairs (its manifest.json says so); give a dataset "
        "prepared for en-de, or a de-en checkpoint"
    ), err
    assert {kind: _files(folder) for kind, folder in folders.items()} == before  # calibrate
    assert not (tmp_path / "distilled").exists()
