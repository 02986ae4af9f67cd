"""Fixtures shared across test folders: a tiny prepared translation dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data.datahelpers import make_pairs, tiny_config, write_lines


@pytest.fixture(scope="session")
def word_task_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3,000 word-for-word 'translation' pairs, prepared (tokenizer vocabulary 400)."""
    from gmlm.data.prepare import prepare_dataset

    root = tmp_path_factory.mktemp("wordtask")
    src, tgt = make_pairs(3000, seed=1)
    write_lines(root / "c.de", src)
    write_lines(root / "c.en", tgt)
    return prepare_dataset(tiny_config(f"files:{root / 'c.de'},{root / 'c.en'}"), root / "data")
