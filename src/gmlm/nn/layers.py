"""Layers both models use unchanged: embeddings, feed-forward, the pre-LayerNorm encoder,
and T5's relative position bias.

Pre-LayerNorm everywhere: every sublayer reads ``LN(x)`` and adds its (dropped-out) output
back to ``x``; each stack ends with a final LayerNorm. Linear layers have no bias (as in T5).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor, nn

from gmlm.errors import GmlmError
from gmlm.nn.attention import MultiHeadAttention
from gmlm.nn.config import ModelConfig
from gmlm.nn.dropout import Dropout

Rows = TypeVar("Rows", bound="EncoderOutput")


@dataclass
class EncoderOutput:
    """What the decoder needs from the encoder.

    memory: (B, S, D) final encoder states of the source tokens.
    padding_mask: (B, S) True at source padding.
    """

    memory: Tensor
    padding_mask: Tensor

    def select(self: Rows, rows: Tensor) -> Rows:
        """Batch rows `rows` (N,) in that order (repeats allowed, e.g. one row per candidate)."""
        picked = {
            f.name: getattr(self, f.name).index_select(0, rows) for f in dataclasses.fields(self)
        }
        return dataclasses.replace(self, **picked)


@dataclass
class DecoderOutput:
    """logits: (B, T, V). With ``return_attention=True`` also the last decoder layer's
    self-attention (B, H, T, T) and cross-attention (B, H, T, S) weights per head."""

    logits: Tensor
    self_attention: Tensor | None = None
    cross_attention: Tensor | None = None


def source_padding_mask(src: Tensor, pad_id: int) -> Tensor:
    """(B, S) True at padding; rejects rows that are all padding (their attention is undefined)."""
    mask = src == pad_id
    empty = mask.all(dim=1)
    if bool(empty.any()):
        rows = empty.nonzero().flatten().tolist()[:10]
        raise GmlmError(
            f"source rows {rows} contain only padding; every source needs at least one token "
            "(append EOS to sources in the data pipeline)"
        )
    return mask


class TokenEmbeddings(nn.Module):
    """Source and target token embeddings and the output projection.

    Tied (the default): one (V, D) table serves all three; it is initialised with std
    D^-1/2 and inputs are scaled by D^1/2, so inputs have unit scale and the tied logits
    ``h @ E.T`` of a layer-normed h start with unit scale too. Untied: three matrices.
    """

    def __init__(self, vocab_size: int, d_model: int, tie: bool) -> None:
        super().__init__()
        self.scale = math.sqrt(d_model)
        self.source = nn.Embedding(vocab_size, d_model)
        self.target = None if tie else nn.Embedding(vocab_size, d_model)
        self.output = None if tie else nn.Linear(d_model, vocab_size, bias=False)

    def embed_source(self, tokens: Tensor) -> Tensor:
        """(B, S) ids -> (B, S, D)."""
        return self.source(tokens) * self.scale

    def embed_target(self, tokens: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, D)."""
        table = self.source if self.target is None else self.target
        return table(tokens) * self.scale

    def logits(self, hidden: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, V)."""
        if self.output is None:
            return hidden @ self.source.weight.t()
        return self.output(hidden)


class PositionEmbedding(nn.Module):
    """A learned absolute position table of `max_len` rows.

    `setting` names the config field that sets `max_len`, for the error on too-long input.
    """

    def __init__(self, max_len: int, d_model: int, setting: str) -> None:
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)
        self.setting = setting

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Embeddings of positions offset .. offset + length - 1, (length, D)."""
        end = offset + length
        if end > self.table.num_embeddings:
            raise GmlmError(
                f"a sequence of {end} tokens is longer than the model's "
                f"{self.table.num_embeddings} positions ({self.setting}); filter or truncate "
                "long sentences, or raise the limit"
            )
        return self.table.weight[offset:end]


def relative_buckets(max_len: int, n_buckets: int, max_distance: int) -> Tensor:
    """T5's bidirectional relative position buckets of every key - query distance r in
    -(max_len - 1) .. max_len - 1, as a (2 * max_len - 1,) table indexed by r + max_len - 1.

    Keys to the left (r <= 0) take buckets [0, n_buckets / 2), keys to the right the other
    half. Within a half, with exact = n_buckets / 4 and d = |r|: d < exact is bucket d; longer
    distances get exact + floor(log(d / exact) / log(max_distance / exact) * (half - exact)),
    capped at half - 1 (every d of max_distance or more shares the last bucket). The floor
    is decided in integers, k <= m log(d/e) / log(M/e) iff d^m e^k >= M^k e^m, so no
    platform's log rounding can move a boundary.
    """
    half = n_buckets // 2
    exact = half // 2
    steps = half - exact

    def bucket(d: int) -> int:
        if d < exact:
            return d
        # Logarithmic steps k = 1 .. steps - 1 passed: (d / exact)^steps >= (M / exact)^k.
        passed = sum(d**steps * exact**k >= max_distance**k * exact**steps for k in range(1, steps))
        return exact + passed

    table = [(half if r > 0 else 0) + bucket(abs(r)) for r in range(-(max_len - 1), max_len)]
    return torch.tensor(table, dtype=torch.long)


class RelativePositionBias(nn.Module):
    """T5 relative position bias: a learned scalar per head and bucket of the key - query
    distance (see :func:`relative_buckets`), for attention among `max_len` positions.

    The bucket of every distance is precomputed once (a buffer, not saved: it follows from
    the config); only the (n_buckets, H) table is a parameter.
    """

    buckets: Tensor

    def __init__(self, n_heads: int, max_len: int, n_buckets: int, max_distance: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(n_buckets, n_heads)
        buckets = relative_buckets(max_len, n_buckets, max_distance)
        self.register_buffer("buckets", buckets, persistent=False)

    def forward(self, length: int) -> Tensor:
        """The bias among positions 0 .. length - 1, (H, length, length): [h, q, k] is the
        table entry of head h for the bucket of k - q."""
        positions = torch.arange(length, device=self.buckets.device)
        distance = positions.unsqueeze(0) - positions.unsqueeze(1) + self.max_len - 1
        return self.table(self.buckets[distance]).permute(2, 0, 1)


class FeedForward(nn.Module):
    """Linear -> GELU -> dropout -> Linear, (B, T, D) -> (B, T, D); the dropout (rate
    `dropout`, active in training) hits the activation."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(nn.functional.gelu(self.up(x))))


class EncoderLayer(nn.Module):
    """LN -> self-attention -> dropout -> residual; LN -> feed-forward -> dropout -> residual."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)
        self.ffn_norm = nn.LayerNorm(config.d_model)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.activation_dropout)
        self.dropout = Dropout(config.dropout)

    def forward(self, x: Tensor, padding_mask: Tensor) -> Tensor:
        """x: (B, S, D), padding_mask: (B, S) -> (B, S, D)."""
        h = self.attn_norm(x)
        queries, kv = self.attn.project_qkv(h)
        attended, _ = self.attn.attend(queries, kv, key_padding_mask=padding_mask)
        x = x + self.dropout(attended)
        return x + self.dropout(self.ffn(self.ffn_norm(x)))


class Encoder(nn.Module):
    """Embedded tokens + learned positions -> dropout -> pre-LN layers -> final LN.

    Token embedding is left to the model so that one table can be shared with the decoder.
    """

    def __init__(self, config: ModelConfig, max_len: int, setting: str) -> None:
        super().__init__()
        self.positions = PositionEmbedding(max_len, config.d_model, setting)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)

    def forward(self, embedded: Tensor, padding_mask: Tensor) -> Tensor:
        """embedded: (B, S, D), padding_mask: (B, S) -> memory (B, S, D)."""
        x = self.dropout(embedded + self.positions(embedded.shape[1]))
        for layer in self.layers:
            x = layer(x, padding_mask)
        return self.norm(x)


def init_weights(model: nn.Module) -> None:
    """Linear and embedding weights ~ N(0, 0.02), except token tables ~ N(0, D^-1/2) (see
    :class:`TokenEmbeddings`); LayerNorm to identity."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    for module in model.modules():
        if isinstance(module, TokenEmbeddings):
            for table in (module.source, module.target):
                if table is not None:
                    nn.init.normal_(table.weight, std=table.embedding_dim**-0.5)


def count_parameters(model: nn.Module) -> int:
    """Number of parameter elements; a tied (shared) tensor counts once."""
    return sum(p.numel() for p in model.parameters())
