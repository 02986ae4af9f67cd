"""PaDIR: an encoder-decoder whose decoder refines a whole hypothesis in parallel.

The encoder reads ``[LENGTH] src``; the [LENGTH] position's final state, dotted with a
learned length table, scores target lengths 1 .. max_target_len (a length counts the EOS).
The decoder is non-causal: every position sees the whole hypothesis (only padding is
masked). Each decoder layer adds positional attention, in which queries and keys come from
the layer-normed position table and values from the hidden states, so each layer can move
information between positions by where they are rather than by what they hold. Optionally
(``relative_bias``) the decoder's self-attention and positional attention also add T5's
relative position bias, one table for each, shared by every layer.

Inference (the refinement loop lives in the decoding package)::

    enc = model.encode(src)                              # src (B, S)
    lengths = model.predict_lengths(enc, top_b=5)        # (B, 5)
    rows = torch.arange(B).repeat_interleave(5)
    memory = model.cross_memory(enc.select(rows))        # reused by every iteration
    hyp = initial_hypothesis(lengths.flatten(), config, generator)   # (B*5, N)
    logits = model.decode(memory, hyp).logits            # (B*5, N, V); argmax -> next hyp
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Literal, cast

import torch
from torch import Tensor, nn

from gmlm.config import ConfigError
from gmlm.errors import GmlmError
from gmlm.nn.attention import KVCache, MultiHeadAttention
from gmlm.nn.config import ModelConfig
from gmlm.nn.dropout import Dropout
from gmlm.nn.layers import (
    DecoderOutput,
    Encoder,
    EncoderOutput,
    FeedForward,
    PositionEmbedding,
    RelativePositionBias,
    TokenEmbeddings,
    init_weights,
    source_padding_mask,
)


def random_tokens(
    shape: tuple[int, ...],
    config: ModelConfig,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Ids drawn uniformly from the ordinary tokens [n_special, vocab_size).

    Drawn on the generator's device (so a seeded CPU generator gives the same ids whatever
    `device` is), then moved to `device`.
    """
    source_device = generator.device if generator is not None else torch.device("cpu")
    ids = torch.randint(
        config.n_special,
        config.vocab_size,
        shape,
        generator=generator,
        device=source_device,
    )
    return ids.to(device) if device is not None else ids


def initial_hypothesis(
    lengths: Tensor,
    config: ModelConfig,
    generator: torch.Generator | None = None,
    mode: Literal["random", "mask"] | None = None,
) -> Tensor:
    """Starting hypotheses for lengths (N,) (each >= 1, counting EOS) -> (N, max(lengths)).

    Row i holds lengths[i] - 1 tokens, then EOS, then padding. The tokens are uniformly random
    ordinary tokens, or [MASK] with ``mode="mask"``; `mode` defaults to
    ``config.init_hypothesis``.
    """
    mode = config.init_hypothesis if mode is None else mode
    if lengths.numel() == 0 or int(lengths.min()) < 1:
        raise GmlmError("initial_hypothesis needs at least one length, each >= 1 (EOS counts)")
    width = int(lengths.max())
    positions = torch.arange(width, device=lengths.device)
    last = (lengths - 1).unsqueeze(1)
    if mode == "random":
        hyp = random_tokens((lengths.shape[0], width), config, generator, lengths.device)
    else:
        hyp = torch.full((lengths.shape[0], width), config.mask_id, device=lengths.device)
    hyp = hyp.masked_fill(positions == last, config.eos_id)
    return hyp.masked_fill(positions > last, config.pad_id)


def ordinary_argmax(logits: Tensor, content: Tensor, is_eos: Tensor, config: ModelConfig) -> Tensor:
    """The hypothesis a decoder pass proposes, (B, T) from logits (B, T, V): the best
    *ordinary* token (special ids are never proposed) at `content` positions (B, T), EOS
    where `is_eos` (B, T), pad everywhere else.

    The indices of ``max``, not ``argmax``: the same first maximum (both documented), but
    torch's CPU argmax over the last dimension is not vectorised, about 2.5 times slower
    (docs/DESIGN.md section 7)."""
    best = logits[..., config.n_special :].max(-1).indices + config.n_special
    return torch.where(content, best, torch.where(is_eos, config.eos_id, config.pad_id))


def stutter_positions(tokens: Tensor, content: Tensor) -> Tensor:
    """(N, W) True where a content token equals its left neighbour (also content)."""
    same = torch.zeros_like(content)
    same[:, 1:] = (tokens[:, 1:] == tokens[:, :-1]) & content[:, 1:] & content[:, :-1]
    return same


@dataclass
class PadirEncoderOutput(EncoderOutput):
    """The source encoding (memory and mask cover source tokens only, not [LENGTH]) and
    length_state: (B, D), the final encoder state at the [LENGTH] position."""

    length_state: Tensor


@dataclass
class DecoderPositions:
    """What the decoder layers know about positions, computed once per pass over T positions.

    table: (T, D) rows of the shared position table (positional attention's queries/keys).
    self_bias, positional_bias: (H, T, T) relative position biases of self-attention and of
        positional attention, or None without ``relative_bias``.
    """

    table: Tensor
    self_bias: Tensor | None = None
    positional_bias: Tensor | None = None
    # Per decoder layer, its positional attention's queries and keys (1, H, T, D/H) each:
    # they depend on the positions alone, so inference makes them once per width for all the
    # passes (PadirModel.positions with project=True); None: each layer projects them.
    positional_qk: tuple[tuple[Tensor, Tensor], ...] | None = None

    def masked(self, padding_mask: Tensor) -> DecoderPositions:
        """These positions with -inf at the padded keys (padding_mask (B, T), True at
        padding) folded into the relative biases, (B, H, T, T) each: what every layer's
        attention would add, made once per pass instead of once per layer."""
        padded = padding_mask[:, None, None, :]
        return replace(
            self,
            self_bias=_fold(self.self_bias, padded),
            positional_bias=_fold(self.positional_bias, padded),
        )


# Widths whose inference positions a model keeps (PadirModel.positions): at most about
# 2 MB each (fp32, width 128, d_model 256, 6 layers), 0.2 MB at a sentence's usual width.
POSITIONS_KEPT = 32


def _fold(bias: Tensor | None, padded: Tensor) -> Tensor | None:
    return None if bias is None else bias.masked_fill(padded, float("-inf"))


class PositionalAttention(nn.Module):
    """Attention whose queries and keys are the layer-normed position embeddings and whose
    values are the hidden states: it mixes positions by where they are, not what they hold."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(config.d_model, config.n_heads, config.attention_dropout)

    def project(self, table: Tensor) -> tuple[Tensor, Tensor]:
        """Queries and keys (1, H, T, D/H) of the position table (T, D): the same for every
        row of a batch and every pass over it."""
        where = self.norm(table).unsqueeze(0)
        return self.attn.project_queries(where), self.attn.project_keys(where)

    def forward(
        self,
        x: Tensor,
        positions: DecoderPositions,
        padding_mask: Tensor | None,
        qk: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """x: (B, T, D); padding_mask: (B, T), or None when positions.positional_bias masks
        the padding already; qk: this layer's projections of the positions (default: made
        here) -> (B, T, D)."""
        queries, keys = self.project(positions.table) if qk is None else qk
        values = self.attn.project_values(x)
        attended, _ = self.attn.attend(
            queries,
            (keys.expand(values.shape[0], -1, -1, -1), values),
            key_padding_mask=padding_mask,
            bias=positions.positional_bias,
        )
        return attended


class DecoderLayer(nn.Module):
    """Pre-LN, in order: LN -> self-attention (padding mask only) -> dropout -> residual;
    positional attention -> residual (no dropout); LN -> cross-attention -> dropout ->
    residual; LN -> feed-forward -> dropout -> residual."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_norm = nn.LayerNorm(config.d_model)
        self.self_attn = MultiHeadAttention(
            config.d_model, config.n_heads, config.attention_dropout
        )
        self.positional = PositionalAttention(config) if config.positional_attention else None
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
        padding_mask: Tensor | None,
        positions: DecoderPositions,
        cross: tuple[Tensor, Tensor],
        src_padding_mask: Tensor | None,
        return_weights: bool = False,
        positional_qk: tuple[Tensor, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x: (B, T, D); padding_mask: (B, T), or None when the relative biases of
        `positions` mask the padding already (DecoderPositions.masked); positional_qk: the
        positional attention's projections of the positions, when made already.

        Returns the new x and, if asked, the self- and cross-attention weights.
        """
        queries, kv = self.self_attn.project_qkv(self.self_norm(x))
        attended, self_weights = self.self_attn.attend(
            queries,
            kv,
            key_padding_mask=padding_mask,
            bias=positions.self_bias,
            return_weights=return_weights,
        )
        x = x + self.dropout(attended)
        if self.positional is not None:
            x = x + self.positional(x, positions, padding_mask, positional_qk)
        attended, cross_weights = self.cross_attn(
            self.cross_norm(x),
            cross,
            key_padding_mask=src_padding_mask,
            return_weights=return_weights,
        )
        x = x + self.dropout(attended)
        x = x + self.dropout(self.ffn(self.ffn_norm(x)))
        return x, self_weights, cross_weights


class PadirModel(nn.Module):
    """Encoder with a length predictor, non-causal decoder with positional attention."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        config.validate()
        if not (config.positional_attention or config.decoder_positions or config.relative_bias):
            raise ConfigError(
                "model.positional_attention, model.decoder_positions and model.relative_bias "
                "are all false: the PaDIR decoder would have no position information; enable "
                "at least one"
            )
        self.config = config
        self.embeddings = TokenEmbeddings(config.vocab_size, config.d_model, config.tie_embeddings)
        self.encoder = Encoder(
            config, config.max_source_len + 1, "model.max_source_len, plus 1 for [LENGTH]"
        )
        self.length_table = nn.Embedding(config.max_target_len, config.d_model)
        self.target_positions = PositionEmbedding(
            config.max_target_len, config.d_model, "model.max_target_len"
        )
        self.self_attention_bias = self._relative_bias() if config.relative_bias else None
        self.positional_attention_bias = (
            self._relative_bias() if config.relative_bias and config.positional_attention else None
        )
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        self.dropout = Dropout(config.dropout)
        init_weights(self)
        # Inference positions by width, most recently used last, and the weights they were
        # made from (see positions).
        self._kept_positions: OrderedDict[int, DecoderPositions] = OrderedDict()
        self._kept_key: tuple[object, ...] | None = None

    def _relative_bias(self) -> RelativePositionBias:
        config = self.config
        return RelativePositionBias(
            config.n_heads,
            config.max_target_len,
            config.relative_buckets,
            config.relative_max_distance,
        )

    def positions(self, length: int, project: bool = False) -> DecoderPositions:
        """Position information for a pass over `length` target positions; `project`: with
        each layer's positional attention queries and keys, for passes that reuse them
        (inference: the weights must not change while they are in use).

        With `project` and gradients off (inference), the result is kept for later passes
        and sentences, up to POSITIONS_KEPT widths (least recently used first out): making
        them takes about 0.5 ms (6 layers' norm and two projections, 2 CPU threads), several
        times per sentence at batch 1, where a whole sentence takes 30-60 ms. The kept
        positions are dropped when a weight they come from changes (an optimizer step,
        load_state_dict, a move to another dtype or device): the key is each such weight's
        storage, version counter, dtype and device, as in MultiHeadAttention._stacked_qkv.
        """
        if not project or torch.is_grad_enabled():
            return self._make_positions(length, project)
        key = self._positions_key()
        if key != self._kept_key:
            self._kept_positions.clear()
            self._kept_key = key
        kept = self._kept_positions.get(length)
        if kept is None:
            kept = self._make_positions(length, project=True)
            self._kept_positions[length] = kept
            if len(self._kept_positions) > POSITIONS_KEPT:
                self._kept_positions.popitem(last=False)
        else:
            self._kept_positions.move_to_end(length)
        return kept

    def _positions_key(self) -> tuple[object, ...]:
        """What the positions depend on: every weight of the position table, the relative
        biases and the layers' positional attention (int8 layers have no parameters here;
        a quantised copy's weights never change)."""
        modules: list[nn.Module | None] = [
            self.target_positions,
            self.self_attention_bias,
            self.positional_attention_bias,
            *(cast(DecoderLayer, layer).positional for layer in self.layers),
        ]
        return tuple(
            (w.data_ptr(), None if w.is_inference() else w._version, w.dtype, w.device)
            for module in modules
            if module is not None
            for w in module.parameters()
        )

    def _make_positions(self, length: int, project: bool) -> DecoderPositions:
        self_bias, positional_bias = self.self_attention_bias, self.positional_attention_bias
        table = self.target_positions(length)
        projected = None
        if project and self.config.positional_attention:
            projected = tuple(
                cast(PositionalAttention, layer.positional).project(table) for layer in self.layers
            )
        return DecoderPositions(
            table,
            None if self_bias is None else self_bias(length),
            None if positional_bias is None else positional_bias(length),
            projected,
        )

    def encode(self, src: Tensor) -> PadirEncoderOutput:
        """src: (B, S) right-padded ids, without [LENGTH] (added here)."""
        return self.encode_masked(src, source_padding_mask(src, self.config.pad_id))

    def encode_masked(self, src: Tensor, padding_mask: Tensor) -> PadirEncoderOutput:
        """:meth:`encode` with src's padding mask (B, S) made and checked already: no host
        sync, so a CUDA graph can record it (:mod:`gmlm.decoding.cuda_graphs`)."""
        length_token = torch.full_like(src[:, :1], self.config.length_id)
        tokens = torch.cat([length_token, src], dim=1)
        full_mask = torch.cat([torch.zeros_like(padding_mask[:, :1]), padding_mask], dim=1)
        states = self.encoder(self.embeddings.embed_source(tokens), full_mask)
        return PadirEncoderOutput(states[:, 1:], padding_mask, states[:, 0])

    def length_logits(self, enc: PadirEncoderOutput) -> Tensor:
        """(B, L) scores of target lengths 1 .. L = max_target_len (index i is length i + 1)."""
        return enc.length_state @ self.length_table.weight.t()

    def predict_lengths(self, enc: PadirEncoderOutput, top_b: int = 1) -> Tensor:
        """The `top_b` most likely target lengths (counting EOS), best first: (B, top_b)."""
        if not 1 <= top_b <= self.config.max_target_len:
            raise GmlmError(
                f"top_b={top_b} must be between 1 and model.max_target_len="
                f"{self.config.max_target_len}"
            )
        return self.length_logits(enc).topk(top_b, dim=-1).indices + 1

    def cross_memory(self, enc: EncoderOutput) -> KVCache:
        """Every decoder layer's cross-attention keys/values of `enc`, (B, H, S, D/H) each.

        Compute once per source and pass to :meth:`decode` at every refinement iteration.
        """
        attns = [cast(MultiHeadAttention, layer.cross_attn) for layer in self.layers]
        projected = [attn.project_kv(enc.memory) for attn in attns]
        return KVCache([k for k, _ in projected], [v for _, v in projected], enc.padding_mask)

    def decode(
        self,
        memory: EncoderOutput | KVCache,
        hyp: Tensor,
        padding_mask: Tensor | None = None,
        return_attention: bool = False,
        positions: DecoderPositions | None = None,
    ) -> DecoderOutput:
        """One parallel decoder pass over hypotheses `hyp` (B, T) -> logits (B, T, V).

        padding_mask: (B, T) True at padding; defaults to ``hyp == pad_id``. Pass it when a
            hypothesis may hold the pad id at a real position (e.g. an argmax in training).
        return_attention: also return the last layer's self-attention (B, H, T, T) and
            cross-attention (B, H, T, S) weights.
        positions: ``self.positions(T)`` made already (refinement makes them once per width,
            with the positional attention projections, for all its passes); default: made here.
        """
        cross = self.cross_memory(memory) if isinstance(memory, EncoderOutput) else memory
        if padding_mask is None:
            padding_mask = hyp == self.config.pad_id
        if positions is None:
            positions = self.positions(hyp.shape[1])
        x = self.embeddings.embed_target(hyp)
        if self.config.decoder_positions:
            x = x + positions.table
        x = self.dropout(x)
        layer_padding: Tensor | None = padding_mask
        if self.config.relative_bias:  # every attention over positions has a bias to mask
            positions, layer_padding = positions.masked(padding_mask), None
        projected = positions.positional_qk
        self_weights = cross_weights = None
        for index, layer in enumerate(self.layers):
            want = return_attention and index == len(self.layers) - 1
            x, self_weights, cross_weights = layer(
                x,
                layer_padding,
                positions,
                cross.layer(index),
                cross.padding_mask,
                want,
                None if projected is None else projected[index],
            )
        logits = self.embeddings.logits(self.final_norm(x))
        return DecoderOutput(logits, self_weights, cross_weights)

    def forward(self, src: Tensor, hyp: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S), hyp (B, T) -> token logits (B, T, V) and length logits (B, L)."""
        enc = self.encode(src)
        return self.decode(enc, hyp).logits, self.length_logits(enc)
