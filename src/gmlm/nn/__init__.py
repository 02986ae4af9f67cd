"""Building blocks shared by the autoregressive baseline and PaDIR."""

from gmlm.nn.attention import KVCache, MultiHeadAttention, attention_mask
from gmlm.nn.config import ModelConfig, base, preset, small, tiny
from gmlm.nn.layers import (
    DecoderOutput,
    Encoder,
    EncoderLayer,
    EncoderOutput,
    FeedForward,
    PositionEmbedding,
    TokenEmbeddings,
    count_parameters,
    init_weights,
    source_padding_mask,
)

__all__ = [
    "DecoderOutput",
    "Encoder",
    "EncoderLayer",
    "EncoderOutput",
    "FeedForward",
    "KVCache",
    "ModelConfig",
    "MultiHeadAttention",
    "PositionEmbedding",
    "TokenEmbeddings",
    "attention_mask",
    "base",
    "count_parameters",
    "init_weights",
    "preset",
    "small",
    "source_padding_mask",
    "tiny",
]
