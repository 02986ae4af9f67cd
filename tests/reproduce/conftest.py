"""Shared fixtures of the reproduction tests."""

from __future__ import annotations

import pytest

from tests.helpers.corpora import make_pairs, write_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A synthetic parallel corpus of 1,500 word-for-word pairs, as a files: corpus spec."""
    root = tmp_path_factory.mktemp("corpus")
    src, tgt = make_pairs(1500, seed=3)
    return write_corpus(root, src, tgt)
