"""The toy task several test folders share: reverse a short word sequence, with a tiny model
configuration. Run such tests on one torch thread (the `one_thread` fixture, tests/conftest.py)."""

from __future__ import annotations

import torch

from gmlm.nn import preset

# 32 positions, not the preset's 64: the decoding tests clamp candidate lengths at 32 and
# reject length_beam=33.
CONFIG = preset("tiny", vocab_size=20, max_source_len=32, max_target_len=32)
PAD, EOS = CONFIG.pad_id, CONFIG.eos_id


def reversal_pairs(count: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Sources `w_1 .. w_n EOS` and targets `w_n .. w_1 EOS`, n in 3..6, right-padded."""
    g = torch.Generator().manual_seed(seed)
    src = torch.full((count, 7), PAD)
    tgt = torch.full((count, 7), PAD)
    for row in range(count):
        n = int(torch.randint(3, 7, (1,), generator=g))
        words = torch.randint(CONFIG.n_special, CONFIG.vocab_size, (n,), generator=g)
        src[row, : n + 1] = torch.cat([words, torch.tensor([EOS])])
        tgt[row, : n + 1] = torch.cat([words.flip(0), torch.tensor([EOS])])
    return src, tgt
