"""The Multi30k checkpoints committed under checkpoints/multi30k-de-en/ (docs/RESULTS.md):
they load as the right kinds, hold bf16 weights under the 80 MB budget, and translate."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gmlm
from gmlm.training.checkpoint import MODEL_FILE, load_tensors

RELEASED = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-de-en"
SOURCES = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau mit einem roten Hut sitzt auf einer Bank.",
]


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_released_checkpoint_loads_and_translates(kind: str) -> None:
    folder = RELEASED / kind
    tensors = load_tensors(folder / MODEL_FILE)
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    translator = gmlm.load(folder, device="cpu")
    assert translator.kind == kind
    outputs = translator.translate(SOURCES)
    assert len(outputs) == len(SOURCES) and all(o.strip() for o in outputs)
    # A trained model, not noise: the obvious content words come through.
    joined = " ".join(outputs).lower()
    assert sum(word in joined for word in ("man", "dogs", "snow", "woman", "hat", "bench")) >= 4


def test_released_checkpoints_fit_the_budget() -> None:
    total = sum(f.stat().st_size for f in RELEASED.rglob("*") if f.is_file())
    assert total < 80 * 10**6, f"{total / 1e6:.1f} MB"
