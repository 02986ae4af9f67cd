"""Multi-head attention on `scaled_dot_product_attention`, and cached keys/values.

Keys and values are projected by the caller (:meth:`MultiHeadAttention.project_kv`) and passed
to the attention call. One module therefore serves plain self-attention, incremental decoding
(concatenate the cached keys first), cross-attention over an encoder memory projected once
per sentence, and PaDIR's positional attention (keys from positions, values from hidden
states).

Self-attention projects queries, keys and values of one input
(:meth:`MultiHeadAttention.project_qkv`); at inference (no gradients) that is one matrix
product with the three weights stacked, made once per set of weights and remade when they
change, instead of three. The parameters and the checkpoint format stay the three separate
projections. The stacked product sums each output in the same way per weight row, but the
BLAS may block it differently, so results can differ from three products in the last bits.

On a GPU the fused call may use the flash, memory-efficient or math kernels, never cuDNN's
(:data:`GPU_KERNELS`): cuDNN's attention builds an execution plan for every new shape, and
decoding meets a new shape at almost every batch (an H100 spent 6.1 ms of host time per
call, 90% of a bf16 PaDIR decode, and bf16 ran 8-14 times slower than fp32; without cuDNN the
same batch took 75.7 ms against fp32's 80). The CPU is not affected.

Masks follow PyTorch's convention: a key padding mask is True at padding, i.e. at keys no
query may attend to. Every query must keep at least one key (a row of only padding has no
defined softmax).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from gmlm.nn.dropout import dropout

GPU_KERNELS = [
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
]
"""The fused attention kernels a CUDA call may use, in torch's order of preference: cuDNN's
left out (it plans per shape; see the module docstring)."""


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with `n_heads` heads of size `d_model / n_heads`.

    With ``return_weights=True`` the same softmax is computed explicitly so that the
    per-head weights (B, H, Tq, Tk) can be returned; otherwise the fused kernel runs, except
    when training on CPU in half precision, where the explicit softmax is faster, or with
    attention dropout, which torch's CPU kernels do not fuse (the explicit path then draws
    the mask with the cheaper :func:`gmlm.nn.dropout.dropout`). Both paths
    add the optional score bias after scaling, then mask, then (in training) drop attention
    probabilities with rate `dropout` (returned weights are the probabilities before dropout).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self._stacked: Tensor | None = None
        self._stacked_key: tuple[object, ...] | None = None

    def _split_heads(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, D/H)."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)

    def _stacked_qkv(self) -> Tensor | None:
        """The (3D, D) query, key and value weights stacked, for inference (None while
        gradients are on, or when the projections are not plain Linear layers, e.g. int8
        dynamic quantisation). Made once and kept until a weight changes: the key holds each
        weight's storage, version counter (bumped by every in-place update, such as an
        optimizer step or load_state_dict; weights made under torch.inference_mode have none,
        and cannot be updated in place outside it) and dtype."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        if torch.is_grad_enabled() or any(type(p) is not nn.Linear for p in projections):
            return None
        weights = [p.weight for p in projections]
        key = tuple(
            (w.data_ptr(), None if w.is_inference() else w._version, w.dtype, w.device)
            for w in weights
        )
        if self._stacked_key != key:
            self._stacked = torch.cat(weights)
            self._stacked_key = key
        return self._stacked

    def project_qkv(self, x: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Self-attention's queries and (keys, values) of x (B, T, D), each (B, H, T, D/H)."""
        stacked = self._stacked_qkv()
        if stacked is None:
            return self._split_heads(self.q_proj(x)), self.project_kv(x)
        queries, keys, values = F.linear(x, stacked).chunk(3, dim=-1)
        return self._split_heads(queries), (self._split_heads(keys), self._split_heads(values))

    def project_queries(self, x: Tensor) -> Tensor:
        """Queries of x (B, T, D), (B, H, T, D/H)."""
        return self._split_heads(self.q_proj(x))

    def project_keys(self, x: Tensor) -> Tensor:
        """Keys of x (B, T, D), (B, H, T, D/H)."""
        return self._split_heads(self.k_proj(x))

    def project_values(self, x: Tensor) -> Tensor:
        """Values of x (B, T, D), (B, H, T, D/H)."""
        return self._split_heads(self.v_proj(x))

    def project_kv(
        self, key_input: Tensor, value_input: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Keys from `key_input` and values from `value_input` (default: the same), (B, H, Tk, D/H).

        A key input with batch size 1 is broadcast over the batch of the value input.
        """
        values = self.project_values(key_input if value_input is None else value_input)
        return self.project_keys(key_input).expand(values.shape[0], -1, -1, -1), values

    def forward(
        self,
        query_input: Tensor,
        kv: tuple[Tensor, Tensor],
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        bias: Tensor | None = None,
        return_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from `query_input` (B, Tq, D) to projected keys/values (B, H, Tk, D/H).
        See :meth:`attend` for the rest."""
        return self.attend(
            self.project_queries(query_input),
            kv,
            key_padding_mask=key_padding_mask,
            causal=causal,
            bias=bias,
            return_weights=return_weights,
        )

    def attend(
        self,
        queries: Tensor,
        kv: tuple[Tensor, Tensor],
        *,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        bias: Tensor | None = None,
        return_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from projected queries (B, H, Tq, D/H) to projected keys/values
        (B, H, Tk, D/H).

        key_padding_mask: (B, Tk), True at keys to ignore.
        causal: query i may see keys up to i + Tk - Tq, so the last query is aligned with the
            last key (this is what incremental decoding with a cache needs).
        bias: (H, Tq, Tk) or (B, H, Tq, Tk), added to the scaled scores (relative positions).
        Queries with batch size 1 are broadcast over the batch of `kv`.
        Returns the output (B, Tq, D) and, if asked, the weights (B, H, Tq, Tk).
        """
        keys, values = kv
        batch = values.shape[0]
        queries = queries.expand(batch, -1, -1, -1)
        q_len, k_len = queries.shape[2], keys.shape[2]
        drop = self.dropout if self.training else 0.0
        fused = not (
            return_weights
            or _slow_fused_backward(queries)
            # CPU kernels have no fused dropout (torch falls back to the explicit softmax):
            # the explicit path draws the mask with gmlm's cheaper dropout.
            or (drop > 0.0 and queries.device.type == "cpu")
        )
        # The fused kernel's own causal flag is top-left aligned, which is only right when
        # square, and it takes no additive mask beside it.
        fused_causal = (
            fused and causal and key_padding_mask is None and bias is None and q_len == k_len
        )
        allowed = None
        if not fused_causal:
            allowed = attention_mask(q_len, k_len, key_padding_mask, causal, queries.device)
        weights = None
        if fused:
            mask = allowed if bias is None else _additive_mask(bias.to(queries.dtype), allowed)
            with sdpa_kernel(GPU_KERNELS) if queries.is_cuda else nullcontext():
                out = F.scaled_dot_product_attention(
                    queries, keys, values, attn_mask=mask, dropout_p=drop, is_causal=fused_causal
                )
        else:
            scores = queries @ keys.transpose(-2, -1) / math.sqrt(self.head_dim)
            if bias is not None:
                scores = scores + bias
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            probs = scores.softmax(dim=-1)
            weights = probs if return_weights else None
            probs = dropout(probs, drop, drop > 0.0)
            out = probs.to(values.dtype) @ values
        out = out.transpose(1, 2).reshape(batch, q_len, -1)
        return self.out_proj(out), weights


def _additive_mask(bias: Tensor, allowed: Tensor | None) -> Tensor:
    """The bias with -inf where attention is not allowed: what the fused kernel adds."""
    return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))


def _slow_fused_backward(queries: Tensor) -> bool:
    """True when training in bf16/fp16 on CPU, where the fused kernel's backward is slow
    (torch 2.13, 2 threads: 2-7x slower than the explicit softmax on sentence-length inputs)."""
    low_precision = queries.dtype in (torch.bfloat16, torch.float16)
    return low_precision and queries.device.type == "cpu" and torch.is_grad_enabled()


def attention_mask(
    q_len: int,
    k_len: int,
    key_padding_mask: Tensor | None,
    causal: bool,
    device: torch.device,
) -> Tensor | None:
    """Boolean mask, True where attention is allowed: (B, 1, Tq, Tk), (Tq, Tk) or None."""
    allowed = None
    if causal:
        allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)
    if key_padding_mask is not None:
        keep = ~key_padding_mask[:, None, None, :]
        allowed = keep if allowed is None else keep & allowed
    return allowed


@dataclass
class KVCache:
    """Projected keys and values for every layer, each (B, H, T, D/H), plus an optional
    key padding mask (B, T).

    Used both for the self-attention cache of incremental decoding (one step longer after
    every decoding step) and for the cross-attention keys/values of an encoder memory
    (computed once per sentence, reused at every decoding step or refinement iteration).
    """

    keys: list[Tensor] = field(default_factory=list)
    values: list[Tensor] = field(default_factory=list)
    padding_mask: Tensor | None = None

    @property
    def length(self) -> int:
        """Number of cached time steps (0 for an empty cache)."""
        return self.keys[0].shape[2] if self.keys else 0

    def layer(self, index: int) -> tuple[Tensor, Tensor]:
        return self.keys[index], self.values[index]

    def narrow(self, start: int, length: int) -> KVCache:
        """Batch rows start .. start + length - 1, as views (no copy)."""
        mask = None if self.padding_mask is None else self.padding_mask.narrow(0, start, length)
        return KVCache(
            [k.narrow(0, start, length) for k in self.keys],
            [v.narrow(0, start, length) for v in self.values],
            mask,
        )

    def select(self, rows: Tensor) -> KVCache:
        """Batch rows `rows` (N,) in that order; rows may repeat (beam search, top-B lengths)
        or be dropped (finished hypotheses)."""
        mask = None if self.padding_mask is None else self.padding_mask.index_select(0, rows)
        return KVCache(
            [k.index_select(0, rows) for k in self.keys],
            [v.index_select(0, rows) for v in self.values],
            mask,
        )
