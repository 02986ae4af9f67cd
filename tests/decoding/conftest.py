"""Tiny models for the decoding tests: untrained ones, and ones overfit for a second or two on
a reversal task so that they stop at different lengths and converge at different passes."""

from __future__ import annotations

import pytest
import torch

from gmlm.data.tokenizer import Tokenizer
from gmlm.models import (
    AutoregressiveModel,
    PadirModel,
)
from gmlm.nn import ModelConfig, preset
from tests.helpers.learned import fit
from tests.helpers.reversal import CONFIG, reversal_pairs
from tests.helpers.sentences import sentences


@pytest.fixture(autouse=True)
def _one_thread(one_thread: None) -> None:
    """Every decoding test runs on one torch thread (tests/conftest.py)."""


@pytest.fixture(scope="session")
def reversal() -> tuple[torch.Tensor, torch.Tensor]:
    return reversal_pairs(16)


def _train(model: torch.nn.Module, src: torch.Tensor, tgt: torch.Tensor, steps: int) -> None:
    fit(model, src, tgt, steps, lr=5e-3, stages=2, seed=0)


@pytest.fixture(scope="session")
def trained_ar(reversal: tuple[torch.Tensor, torch.Tensor]) -> AutoregressiveModel:
    torch.manual_seed(0)
    model = AutoregressiveModel(CONFIG)
    _train(model, *reversal, steps=150)
    return model


@pytest.fixture(scope="session")
def trained_padir(reversal: tuple[torch.Tensor, torch.Tensor]) -> PadirModel:
    torch.manual_seed(0)
    model = PadirModel(CONFIG)
    _train(model, *reversal, steps=150)
    return model


@pytest.fixture
def untrained_ar() -> AutoregressiveModel:
    torch.manual_seed(1)
    return AutoregressiveModel(CONFIG).eval()


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(sentences(300), vocab_size=400, threads=1)


@pytest.fixture(scope="session")
def text_config(tokenizer: Tokenizer) -> ModelConfig:
    # Untied embeddings: a tied untrained model copies its input, and its PaDIR outputs are
    # then all dropped as unchanged initial tokens, which would make empty outputs pass.
    return preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        max_source_len=24,
        max_target_len=24,
        tie_embeddings=False,
    )
