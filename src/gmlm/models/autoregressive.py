"""The autoregressive baseline: a pre-LN Transformer encoder-decoder with a causal decoder.

Training (teacher forcing)::

    logits = model(src, teacher_forcing_input(tgt, config))      # (B, T, V) predicts tgt

Decoding with a key/value cache (greedy or beam search)::

    cache = model.start_cache(model.encode(src))
    logits, cache = model.decode_step(tokens, cache)   # tokens (B, t): BOS first, then 1 a step
    cache = cache.select(rows)                         # reorder beams / drop finished rows

Target sequences are right-padded: ``y_1 .. y_n EOS pad ..``. Left padding is not supported
(the causal self-attention has no padding mask because right padding never precedes a token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn

from gmlm.config import ConfigError
from gmlm.nn.attention import KVCache, MultiHeadAttention
from gmlm.nn.config import ModelConfig
from gmlm.nn.dropout import Dropout
from gmlm.nn.layers import (
    DecoderOutput,
    Encoder,
    EncoderOutput,
    FeedForward,
    PositionEmbedding,
    TokenEmbeddings,
    init_weights,
    source_padding_mask,
)


def teacher_forcing_input(targets: Tensor, config: ModelConfig) -> Tensor:
    """Targets (B, T) -> decoder input (B, T): BOS followed by the targets shifted right,
    with pad wherever the target is pad."""
    shifted = torch.cat([torch.full_like(targets[:, :1], config.bos_id), targets[:, :-1]], dim=1)
    return shifted.masked_fill(targets == config.pad_id, config.pad_id)


@dataclass
class DecoderCache:
    """Everything incremental decoding keeps between steps.

    cross: per-layer cross-attention keys/values of the encoder memory (B, H, S, D/H) and the
        source padding mask (B, S); computed once per sentence.
    past: per-layer self-attention keys/values of the tokens decoded so far (B, H, t, D/H).
    """

    cross: KVCache
    past: KVCache

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the next token's position)."""
        return self.past.length

    def select(self, rows: Tensor) -> DecoderCache:
        """Batch rows `rows` (N,) in that order: beam reordering or dropping finished rows."""
        return DecoderCache(self.cross.select(rows), self.past.select(rows))


class DecoderLayer(nn.Module):
    """LN -> causal self-attention -> dropout -> residual; LN -> cross-attention -> dropout ->
    residual; LN -> feed-forward -> dropout -> residual."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_norm = nn.LayerNorm(config.d_model)
        self.self_attn = MultiHeadAttention(
            config.d_model, config.n_heads, config.attention_dropout
        )
        self.cross_norm = nn.LayerNorm(config.d_model)
        self.cross_attn = MultiHeadAttention(
            config.d_model, config.n_heads, config.attention_dropout
        )
        self.ffn_norm = nn.LayerNorm(config.d_model)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.activation_dropout)
        self.dropout = Dropout(config.dropout)

    def forward(
        self,
        x: Tensor,
        past: tuple[Tensor, Tensor] | None,
        cross: tuple[Tensor, Tensor],
        src_padding_mask: Tensor | None,
        return_weights: bool = False,
    ) -> tuple[Tensor, tuple[Tensor, Tensor], Tensor | None, Tensor | None]:
        """x: (B, t, D) the new positions; past: cached self-attention keys/values of earlier
        positions (B, H, t0, D/H) or None. Returns the new x, the keys/values of all t0 + t
        positions, and the self- and cross-attention weights if asked."""
        queries, (keys, values) = self.self_attn.project_qkv(self.self_norm(x))
        if past is not None:
            keys = torch.cat([past[0], keys], dim=2)
            values = torch.cat([past[1], values], dim=2)
        attended, self_weights = self.self_attn.attend(
            queries, (keys, values), causal=True, return_weights=return_weights
        )
        x = x + self.dropout(attended)
        x, cross_weights = self._cross_and_ffn(x, cross, src_padding_mask, return_weights)
        return x, (keys, values), self_weights, cross_weights

    def step_in_place(
        self,
        x: Tensor,
        position: Tensor,
        past: tuple[Tensor, Tensor],
        later: Tensor,
        cross: tuple[Tensor, Tensor],
        src_padding_mask: Tensor | None,
    ) -> Tensor:
        """One new position x (N, 1, D) at `position` (a 0-dim long tensor): its keys/values
        are written into the preallocated `past` (N, H, L, D/H) at that position, and it
        attends to the positions up to it (`later`: (N, L), True past it). Returns the new x."""
        queries, (keys, values) = self.self_attn.project_qkv(self.self_norm(x))
        index = position.view(1)
        past[0].index_copy_(2, index, keys)
        past[1].index_copy_(2, index, values)
        attended, _ = self.self_attn.attend(queries, past, key_padding_mask=later)
        x = x + self.dropout(attended)
        return self._cross_and_ffn(x, cross, src_padding_mask, False)[0]

    def _cross_and_ffn(
        self,
        x: Tensor,
        cross: tuple[Tensor, Tensor],
        src_padding_mask: Tensor | None,
        return_weights: bool,
    ) -> tuple[Tensor, Tensor | None]:
        attended, cross_weights = self.cross_attn(
            self.cross_norm(x),
            cross,
            key_padding_mask=src_padding_mask,
            return_weights=return_weights,
        )
        x = x + self.dropout(attended)
        x = x + self.dropout(self.ffn(self.ffn_norm(x)))
        return x, cross_weights


class AutoregressiveModel(nn.Module):
    """Encoder-decoder translation model decoded left to right."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        config.validate()
        if config.relative_bias:
            raise ConfigError(
                "model.relative_bias is a PaDIR option; the autoregressive decoder uses "
                "absolute positions: set model.relative_bias=false for kind=ar"
            )
        self.config = config
        self.embeddings = TokenEmbeddings(config.vocab_size, config.d_model, config.tie_embeddings)
        self.encoder = Encoder(config, config.max_source_len, "model.max_source_len")
        self.target_positions = PositionEmbedding(
            config.max_target_len, config.d_model, "model.max_target_len"
        )
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)
        init_weights(self)

    def encode(self, src: Tensor) -> EncoderOutput:
        """src: (B, S) right-padded token ids -> memory (B, S, D) and padding mask (B, S)."""
        return self.encode_masked(src, source_padding_mask(src, self.config.pad_id))

    def encode_masked(self, src: Tensor, padding_mask: Tensor) -> EncoderOutput:
        """:meth:`encode` with src's padding mask (B, S) made and checked already: no host
        sync, so a CUDA graph can record it (:mod:`gmlm.decoding.cuda_graphs`)."""
        memory = self.encoder(self.embeddings.embed_source(src), padding_mask)
        return EncoderOutput(memory, padding_mask)

    def cross_memory(self, enc: EncoderOutput) -> KVCache:
        """Every decoder layer's cross-attention keys/values of `enc`, (B, H, S, D/H) each."""
        attns = [cast(MultiHeadAttention, layer.cross_attn) for layer in self.layers]
        projected = [attn.project_kv(enc.memory) for attn in attns]
        return KVCache([k for k, _ in projected], [v for _, v in projected], enc.padding_mask)

    def start_cache(self, memory: EncoderOutput | KVCache) -> DecoderCache:
        """An empty decoding cache over an encoded source (or its precomputed cross memory)."""
        cross = self.cross_memory(memory) if isinstance(memory, EncoderOutput) else memory
        return DecoderCache(cross, KVCache())

    def decode_step(self, tokens: Tensor, cache: DecoderCache) -> tuple[Tensor, DecoderCache]:
        """Feed the next tokens (B, t) at positions cache.length .. cache.length + t - 1.

        Returns their logits (B, t, V) (the last row predicts the following token) and a new
        cache that includes them; `cache` itself is left unchanged.
        """
        out, cache = self._run_decoder(tokens, cache, return_attention=False)
        return out.logits, cache

    def decode_step_in_place(
        self, tokens: Tensor, position: Tensor, cross: KVCache, past: KVCache
    ) -> Tensor:
        """Feed one token per row, tokens (N, 1), at `position` (a 0-dim long tensor, the
        same for every row) on a preallocated self-attention cache `past` (N, H, L, D/H per
        layer), which this writes in place at that position; keys after it are masked, so
        their contents do not matter. Nothing is read on the host and every shape is fixed:
        a CUDA graph can record it (:mod:`gmlm.decoding.autoregressive_fixed`). Returns the
        next token's logits (N, V): :meth:`decode_step`'s up to float rounding."""
        rows, width = tokens.shape[0], past.keys[0].shape[2]
        table = self.target_positions.table.weight
        x = self.dropout(
            self.embeddings.embed_target(tokens) + table.index_select(0, position.view(1))
        )
        later = (torch.arange(width, device=tokens.device) > position).expand(rows, width)
        for index, layer in enumerate(cast(list[DecoderLayer], self.layers)):
            x = layer.step_in_place(
                x, position, past.layer(index), later, cross.layer(index), cross.padding_mask
            )
        return self.embeddings.logits(self.final_norm(x))[:, -1]

    def decode(
        self, memory: EncoderOutput | KVCache, tgt_in: Tensor, return_attention: bool = False
    ) -> DecoderOutput:
        """Teacher-forced decoder pass over the whole input `tgt_in` (B, T) -> logits (B, T, V);
        with `return_attention`, the last layer's weights (see :class:`DecoderOutput`)."""
        out, _ = self._run_decoder(tgt_in, self.start_cache(memory), return_attention)
        return out

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src (B, S), tgt_in (B, T) from :func:`teacher_forcing_input` -> logits (B, T, V)."""
        return self.decode(self.encode(src), tgt_in).logits

    def _run_decoder(
        self, tokens: Tensor, cache: DecoderCache, return_attention: bool
    ) -> tuple[DecoderOutput, DecoderCache]:
        start = cache.length
        positions = self.target_positions(tokens.shape[1], offset=start)
        x = self.dropout(self.embeddings.embed_target(tokens) + positions)
        keys, values = [], []
        self_weights = cross_weights = None
        for index, layer in enumerate(self.layers):
            past = cache.past.layer(index) if start else None
            want = return_attention and index == len(self.layers) - 1
            x, (k, v), self_weights, cross_weights = layer(
                x, past, cache.cross.layer(index), cache.cross.padding_mask, want
            )
            keys.append(k)
            values.append(v)
        logits = self.embeddings.logits(self.final_norm(x))
        new_cache = DecoderCache(cache.cross, KVCache(keys, values))
        return DecoderOutput(logits, self_weights, cross_weights), new_cache
