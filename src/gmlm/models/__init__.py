"""The two translation models, one per file, and their training objectives."""

from __future__ import annotations

from typing import Literal

from gmlm.models.autoregressive import AutoregressiveModel, DecoderCache, teacher_forcing_input
from gmlm.models.losses import (
    LossOutput,
    autoregressive_loss,
    length_targets,
    next_stage_input,
    noise_targets,
    padir_loss,
    token_cross_entropy,
)
from gmlm.models.padir import PadirEncoderOutput, PadirModel, initial_hypothesis, random_tokens
from gmlm.nn.config import ModelConfig

ModelKind = Literal["ar", "padir"]


def build_model(kind: ModelKind, config: ModelConfig) -> AutoregressiveModel | PadirModel:
    """A freshly initialised model of `kind` ("ar" or "padir")."""
    return AutoregressiveModel(config) if kind == "ar" else PadirModel(config)


__all__ = [
    "AutoregressiveModel",
    "DecoderCache",
    "LossOutput",
    "ModelKind",
    "PadirEncoderOutput",
    "PadirModel",
    "autoregressive_loss",
    "build_model",
    "initial_hypothesis",
    "length_targets",
    "next_stage_input",
    "noise_targets",
    "padir_loss",
    "random_tokens",
    "teacher_forcing_input",
    "token_cross_entropy",
]
