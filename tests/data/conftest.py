"""Fixtures shared by the data tests (helpers live in tests/helpers/corpora.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.corpora import make_pairs, tiny_config, write_corpus, write_lines


@pytest.fixture
def parallel_files(tmp_path: Path) -> tuple[Path, Path]:
    src, tgt = make_pairs(400)
    return write_lines(tmp_path / "train.de", src), write_lines(tmp_path / "train.en.gz", tgt)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prepared dataset of 2,000 synthetic pairs (shared, read-only)."""
    from gmlm.data.prepare import prepare_dataset

    root = tmp_path_factory.mktemp("tiny")
    src, tgt = make_pairs(2000, seed=1)
    cfg = tiny_config(write_corpus(root, src, tgt))
    return prepare_dataset(cfg, root / "dataset")
