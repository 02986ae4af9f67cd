"""Validation scores the translations of the function it is given (the trainer passes its
model's), so that training needs nothing from the translation package."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gmlm.data.binarized import load_dataset
from gmlm.models import build_model
from gmlm.training.config import load_train_config, use_vocab_size
from gmlm.training.validation import validate, validation_pairs


def test_validation_scores_what_the_translate_function_returns(word_task_data: Path) -> None:
    data = load_dataset(word_task_data)
    cfg = load_train_config("tiny-ar", [f"data={word_task_data}", "valid_sentences=4"])
    use_vocab_size(cfg, data.tokenizer)
    model = build_model(cfg.kind, cfg.model)
    pairs = validation_pairs(data, cfg.valid_sentences)
    asked: list[list[list[int]]] = []

    def references(sources: list[list[int]]) -> list[str]:
        asked.append(sources)
        return pairs.references

    scores = validate(model, cfg, data, torch.device("cpu"), None, references, pairs)
    assert asked == [pairs.sources] and len(pairs.sources) == 4
    assert scores["bleu"] == pytest.approx(100.0) and scores["loss"] > 0
    wrong = validate(model, cfg, data, torch.device("cpu"), None, lambda s: ["x"] * len(s))
    assert wrong["bleu"] < 1.0 and wrong["loss"] == scores["loss"]
