"""The two translation models, one per file, and their training objectives."""

from __future__ import annotations

from typing import Literal

from gmlm.memory import check_memory
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


def weight_bytes(kind: ModelKind, config: ModelConfig) -> int:
    """Bytes of the float32 weights of a model of `kind` with `config`, a lower bound (norms,
    biases and PaDIR's small tables left out): the token embeddings and output projection (one
    matrix when tied, else three), the position tables, and every layer's attention (4 d^2
    each: one in an encoder layer; self- and cross-attention in a decoder layer, and PaDIR's
    positional attention) and feed-forward (2 d d_ff)."""
    d = config.d_model
    tables = config.vocab_size * d * (1 if config.tie_embeddings else 3)
    tables += (config.max_source_len + config.max_target_len) * d
    feed_forward = 2 * d * config.d_ff
    attentions = 3 if kind == "padir" and config.positional_attention else 2
    layers = config.n_encoder_layers * (4 * d * d + feed_forward)
    layers += config.n_decoder_layers * (attentions * 4 * d * d + feed_forward)
    return 4 * (tables + layers)


def build_model(kind: ModelKind, config: ModelConfig) -> AutoregressiveModel | PadirModel:
    """A freshly initialised model of `kind` ("ar" or "padir"), once its weights are known to
    fit in the memory there is (:func:`weight_bytes`)."""
    check_memory(
        weight_bytes(kind, config),
        f"the weights of a model with d_model={config.d_model}, d_ff={config.d_ff}, "
        f"{config.n_encoder_layers}+{config.n_decoder_layers} layers and a vocabulary of "
        f"{config.vocab_size}",
        "lower the model's sizes (model.d_model, model.d_ff, the layers, model.vocab_size)",
    )
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
    "weight_bytes",
]
