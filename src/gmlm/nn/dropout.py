"""Dropout that draws a quarter of a random number per element on CPUs.

torch's CPU dropout draws one random number per element (`bernoulli_`, on one thread), and
its fused attention has no dropout on CPUs (it falls back to the explicit softmax). With the
multi30k recipe's dropout on residual branches, attention probabilities and feed-forward
activations, `bernoulli_` alone took 11% of a small-padir training step's CPU time (torch
profiler, 1 thread). Here each 64-bit random word of the default generator gives four 16-bit
uniform numbers, and an element is dropped where its number falls below the drop probability
rounded to a multiple of 1/65536 (0.1 becomes 0.100006); kept elements are scaled by
1 / (1 - that probability), so every element's expectation is exact, as with
`torch.nn.functional.dropout`.

Measured with `gmlm throughput --precision fp32 --config small-padir data=DIR threads=2`
plus the multi30k preset's PaDIR overrides (Multi30k, 8 timed steps, AMD EPYC with AVX2,
2 threads): 401 and 415 target tokens/s with torch's dropout, 468 and 538 with this one
(two runs each; 1.17-1.30x). The multi30k run's small-ar teacher, resumed across the change,
logged 690-830 target tokens/s before it and 1,170-1,210 after (its metrics.jsonl; 2 threads,
the machine otherwise idle).

Elsewhere (CUDA) it is `F.dropout`, whose fused kernels are fast. The masks follow the
default CPU generator, so `torch.manual_seed` and the trainer's saved RNG state make them
reproducible as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16  # the 16-bit uniform numbers: four per 64-bit random word


def drop_levels(p: float) -> int:
    """How many of the LEVELS numbers drop an element: p rounded to a multiple of 1/LEVELS."""
    return round(p * LEVELS)


def dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """`x` with each element zeroed with probability `p` (rounded as `drop_levels` does, on
    CPUs) and the rest scaled by 1 / (1 - p); `x` itself when not `training` or p = 0."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu":
        return F.dropout(x, p, True)
    dropped = drop_levels(p)
    if dropped >= LEVELS:
        return x * 0.0
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None)
    numbers = words.view(torch.int16)[:n].view(x.shape)  # uniform on -32768 .. 32767
    keep = numbers >= dropped - LEVELS // 2
    return x * keep.to(x.dtype).mul_(LEVELS / (LEVELS - dropped))


class Dropout(nn.Module):
    """`torch.nn.Dropout` drawing its masks with :func:`dropout`."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
