"""Building blocks shared by the autoregressive baseline and PaDIR."""

from gmlm.nn.attention import KVCache, MultiHeadAttention, attention_mask
from gmlm.nn.config import ModelConfig, preset
from gmlm.nn.layers import (
    DecoderOutput,
    Encoder,
    EncoderLayer,
    EncoderOutput,
    FeedForward,
    PositionEmbedding,
    RelativePositionBias,
    TokenEmbeddings,
    count_parameters,
    init_weights,
    relative_buckets,
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
    "RelativePositionBias",
    "TokenEmbeddings",
    "attention_mask",
    "count_parameters",
    "init_weights",
    "preset",
    "relative_buckets",
    "source_padding_mask",
]
