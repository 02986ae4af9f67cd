"""The models the service tests serve: the trained tiny PaDIR and an untrained tiny AR."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_models(padir_run: Path, word_task_data: Path, tmp_path_factory: pytest.TempPathFactory):
    """{name: folder}: the trained tiny PaDIR and an untrained tiny AR with its tokenizer."""
    from gmlm.data.binarized import load_dataset
    from tests.helpers.checkpoints import write_checkpoint

    folder = tmp_path_factory.mktemp("serve") / "ar"
    ar = write_checkpoint(folder, "ar", load_dataset(word_task_data).tokenizer)
    return {"padir": str(padir_run), "ar": str(ar)}
