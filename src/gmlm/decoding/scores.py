"""Scoring shared by beam search and PaDIR candidate selection.

A hypothesis is scored by its summed token log-probability (EOS included) divided by the
GNMT length penalty (Wu et al. 2016, also flax's WMT example and T5X's beam search)::

    score = log P(y) / ((5 + |y|) / 6) ** alpha        |y| counts the EOS

alpha = 0 leaves the raw sum, which favours short outputs; larger alpha favours longer ones
(alpha = 0.6 is the usual machine-translation setting). Unlike fairseq's ``|y| ** alpha``
the penalty is 1 for a one-token output and grows slowly, so alpha = 1 is not a plain mean.
"""

from __future__ import annotations

import torch
from torch import Tensor


def length_penalty(lengths: Tensor | int, alpha: float) -> Tensor:
    """((5 + lengths) / 6) ** alpha as a float tensor of the shape of `lengths`."""
    lengths = torch.as_tensor(lengths, dtype=torch.float32)
    return ((5.0 + lengths) / 6.0) ** alpha
