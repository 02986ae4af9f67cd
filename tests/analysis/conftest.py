"""Checkpoints for the analysis tests: the tiny trained PaDIR run `padir_run` (tests/conftest.py;
it still stutters a lot, so both pair groups are populated) and an untrained autoregressive
one (only its kind matters)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gmlm.checkpoint.files import fill_inference_files, write_checkpoint_dir
from gmlm.data.binarized import load_dataset
from gmlm.models import build_model
from gmlm.nn import preset
from gmlm.training.config import TrainConfig


@pytest.fixture(scope="session")
def ar_checkpoint(word_task_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = load_dataset(word_task_data).tokenizer
    cfg = TrainConfig(kind="ar", model=preset("tiny", vocab_size=tokenizer.vocab_size))
    model = build_model("ar", cfg.model)
    folder = tmp_path_factory.mktemp("analysis") / "ar"
    write_checkpoint_dir(folder, lambda tmp: fill_inference_files(tmp, model, cfg, tokenizer, {}))
    return folder


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Translating fails the test: for checks that must refuse bad input before any decoding."""
    from gmlm.translation.translator import Translator

    def refused(*_args: object, **_kwargs: object) -> list[str]:
        raise AssertionError("decoded before the settings were checked")

    monkeypatch.setattr(Translator, "translate", refused)
