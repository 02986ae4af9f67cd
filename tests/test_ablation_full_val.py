"""tools/ablation_full_val.sh, the whole-validation scoring of the training ablation in
docs/history/multi30k-de-en-notes.md, on a tiny stand-in for a `multi30k-ablation` run
folder: every variant at the baseline's step is translated and scored against it, one still
training is skipped, and an existing output folder or a folder that is no such run is refused
before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gmlm.checkpoint.files import fill_inference_files, write_checkpoint_dir
from gmlm.data.tokenizer import Tokenizer
from gmlm.models import build_model
from gmlm.nn import ModelConfig
from gmlm.training.config import TrainConfig
from tests.helpers.sentences import sentences

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools/ablation_full_val.sh"


def padir_checkpoint(
    folder: Path, tokenizer: Tokenizer, config: ModelConfig, step: int, seed: int
) -> None:
    torch.manual_seed(seed)
    model = build_model("padir", config)
    cfg = TrainConfig(kind="padir", model=config)
    write_checkpoint_dir(
        folder, lambda tmp: fill_inference_files(tmp, model, cfg, tokenizer, {"step": step})
    )


def run_script(run: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PY": sys.executable,
        "THREADS": "1",
        "PYTHONPATH": str(ROOT / "src"),
    }
    return subprocess.run(
        ["bash", str(SCRIPT), str(run), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def run_folder(
    tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer, text_config: ModelConfig
) -> Path:
    run = tmp_path_factory.mktemp("ablation") / "run"
    (run / "data").mkdir(parents=True)
    lines = sentences(12, seed=7)
    (run / "data/valid.src.txt").write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    (run / "data/valid.tgt.txt").write_text("".join(s + "\n" for s in lines), encoding="utf-8")
    padir_checkpoint(run / "padir/last", tokenizer, text_config, step=30, seed=0)
    padir_checkpoint(run / "train_ablation/a=1/last", tokenizer, text_config, step=30, seed=1)
    padir_checkpoint(run / "train_ablation/b=2/last", tokenizer, text_config, step=12, seed=2)
    return run


def test_scores_every_finished_variant_against_the_baseline(
    run_folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "scores"
    done = run_script(run_folder, out)
    assert done.returncode == 0, done.stderr
    assert "skipping b=2: its last checkpoint is at step 12, not 30" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "a=1.hyp",
        "baseline.hyp",
        "paired-bs.json",
        "steps.txt",
    ]
    for name in ("baseline", "a=1"):
        assert len((out / f"{name}.hyp").read_text(encoding="utf-8").splitlines()) == 12
    assert (out / "steps.txt").read_text(encoding="utf-8") == "baseline 30\na=1 30\n"
    rows = json.loads((out / "paired-bs.json").read_text(encoding="utf-8"))
    assert [Path(r["system"].removeprefix("Baseline: ")).name for r in rows] == [
        "baseline.hyp",
        "a=1.hyp",
    ]
    assert rows[0]["BLEU"]["p_value"] is None and 0 <= rows[1]["BLEU"]["p_value"] <= 1
    printed = done.stdout.splitlines()
    assert len(printed) == 2 and printed[0].endswith("baseline)  baseline")
    assert printed[1].endswith("  a=1") and "p=" in printed[1]


def test_refuses_an_existing_output_folder_and_a_folder_that_is_no_run(
    run_folder: Path, tmp_path: Path
) -> None:
    out = tmp_path / "scores"
    out.mkdir()
    (out / "mine.txt").write_text("keep", encoding="utf-8")
    done = run_script(run_folder, out)
    assert done.returncode == 1 and "exists: give a new folder" in done.stderr
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    done = run_script(tmp_path / "nothing", tmp_path / "new")
    assert done.returncode == 1 and "a multi30k-ablation reproduction?" in done.stderr
    assert not (tmp_path / "new").exists()
