"""Checkpoints for the analysis tests: a tiny PaDIR model trained for a few seconds on the
word task (it still stutters a lot, so both pair groups are populated) and an untrained
autoregressive one (only its kind matters)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gmlm.data.binarized import load_dataset
from gmlm.models import build_model
from gmlm.nn import tiny
from gmlm.training import checkpoint
from gmlm.training.config import TrainConfig, load_train_config
from gmlm.training.trainer import Trainer


@pytest.fixture(scope="session")
def padir_run(word_task_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("analysis") / "padir"
    overrides = ["max_steps=40", "valid_every=40", "valid_sentences=0", "log_every=10", "threads=1"]
    cfg = load_train_config("tiny-padir", [f"data={word_task_data}", f"out={out}", *overrides])
    threads = torch.get_num_threads()
    Trainer(cfg, progress=False, log=lambda _message: None).run()
    torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="session")
def ar_checkpoint(word_task_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = load_dataset(word_task_data).tokenizer
    cfg = TrainConfig(kind="ar", model=tiny(vocab_size=tokenizer.vocab_size))
    model = build_model("ar", cfg.model)
    folder = tmp_path_factory.mktemp("analysis") / "ar"
    checkpoint.write_checkpoint_dir(
        folder, lambda tmp: checkpoint.fill_inference_files(tmp, model, cfg, tokenizer, {})
    )
    return folder
