"""Hand-made attention weights for the attention-metric tests."""

from __future__ import annotations

import torch

# One hypothesis of 3 tokens + EOS, two heads; rows are queries, columns keys.
HEAD0 = [
    [0.1, 0.6, 0.2, 0.1],
    [0.5, 0.1, 0.3, 0.1],
    [0.2, 0.2, 0.2, 0.4],
    [0.25, 0.25, 0.25, 0.25],
]
HEAD1 = torch.eye(4).tolist()
SELF = torch.tensor([HEAD0, HEAD1])  # (H, N, N)
