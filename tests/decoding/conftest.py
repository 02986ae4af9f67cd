"""Every decoding test runs on one torch thread; the toy models they decode with are in
tests/conftest.py, shared with tests/translation/."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every decoding test runs on one torch thread (tests/conftest.py)."""
