"""Every translation test runs on one torch thread; the toy models are in tests/conftest.py."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every translation test runs on one torch thread (tests/conftest.py)."""
