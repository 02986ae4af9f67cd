"""PaDIR's initial random tokens as a counter-based draw keyed by the sentence itself.

A sentence's random tokens depend on the run's seed and the sentence's own source token ids
only, never on where it stands (its line in a file, its place in a batch, the batch size,
the other sentences): the same sentence translates the same wherever it is, so a document
that repeats a sentence translates it alike and a service can cache. The draw is integer
arithmetic on tensors on the model's device: no generator objects, no host round trip, so a
whole decode can be recorded as a CUDA graph.

The rule (every quantity an integer in [0, 2**32), arithmetic mod 2**32, ``mix`` the
"lowbias32" integer hash of C. Wellons, ``x ^= x >> 16; x *= 0x7FEB352D; x ^= x >> 15;
x *= 0x846CA68B; x ^= x >> 16``):

* seed word: the first 4 bytes, little-endian, of ``hashlib.blake2b(str(seed), digest_size=8)``;
* sentence key: ``mix(seed word ^ sum_j mix(mix(j + POSITION) ^ t_j))`` over the positions j of
  its source ids t_j (EOS included, padding excluded): order-sensitive, width-independent;
* candidate k of the sentence (0 .. K-1), position i: ``mix(mix(key ^ mix(k + CANDIDATE)) +
  mix(i + POSITION))``, and the token is ``n_special + that % (vocab_size - n_special)``.

So candidate k's token at position i does not depend on the candidate's length or the
width of the batch either. Multiplication mod 2**32 is done in int64 as two 16-bit halves,
so no product overflows and every device gives the same bits.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from gmlm.nn.config import ModelConfig

MASK = 0xFFFFFFFF
POSITION = 0x9E3779B9
CANDIDATE = 0x85EBCA6B


def _times(x: Tensor, factor: int) -> Tensor:
    """x * factor mod 2**32 for int64 x in [0, 2**32), without overflowing int64."""
    low, high = factor & 0xFFFF, factor >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & MASK


def mix(x: Tensor) -> Tensor:
    """The lowbias32 hash of int64 x in [0, 2**32), elementwise (module docstring)."""
    x = x ^ (x >> 16)
    x = _times(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _times(x, 0x846CA68B)
    return x ^ (x >> 16)


def seed_word(seed: int) -> int:
    """The 32-bit word of a run's seed that keys every sentence (module docstring)."""
    digest = hashlib.blake2b(str(int(seed)).encode("ascii"), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little")


def sentence_keys(src: Tensor, pad_id: int, seed: int) -> Tensor:
    """(B,) int64 keys of the source rows src (B, S) (ids, right-padded with `pad_id`) under
    `seed`: a function of each row's own ids, not of S or the other rows."""
    positions = torch.arange(src.shape[1], device=src.device)
    terms = mix(mix(positions + POSITION).unsqueeze(0) ^ src.long())
    total = terms.masked_fill(src == pad_id, 0).sum(1) & MASK
    return mix(total ^ seed_word(seed))


def keyed_tokens(keys: Tensor, candidates: int, width: int, config: ModelConfig) -> Tensor:
    """(B * candidates, width) ordinary token ids: row b * candidates + k holds candidate
    k's draw of sentence b (key keys[b]) at positions 0 .. width - 1."""
    index = torch.arange(candidates, device=keys.device)
    rows = mix(keys.unsqueeze(1) ^ mix(index + CANDIDATE).unsqueeze(0)).flatten()
    columns = mix(torch.arange(width, device=keys.device) + POSITION)
    words = mix((rows.unsqueeze(1) + columns.unsqueeze(0)) & MASK)
    return config.n_special + words % (config.vocab_size - config.n_special)


__all__ = ["keyed_tokens", "mix", "seed_word", "sentence_keys"]
