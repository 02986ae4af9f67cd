"""Training steps timed per precision, interleaved, and ``precision=auto`` decided by them.

`time_steps` trains identical copies of a model, one per precision (fp32, bf16 autocast), on
the same batches, interleaving their steps (fp32, bf16, fp32, ...) so that machine noise hits
both alike; `gmlm throughput` reports its rates. `measured_precision` is what a training run
with ``precision=auto`` uses on a device where bf16 is an option (a CUDA GPU with bf16): a few
steps of each on the run's own first batches, bf16 only where it trained at least as fast. On
an H100, bf16 autocast trained at 0.13-0.5x the fp32 rate while cuDNN's attention planned every
shape, which an assumption ("bf16 is faster on GPUs") would have locked in.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn

from gmlm.data.batching import Batch
from gmlm.training.config import TrainConfig
from gmlm.training.objective import loss_module, objective
from gmlm.training.optim import build_optimizer
from gmlm.training.precision import autocast

TRAINING_PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}
"""The precisions a training step can run in, by name: their autocast dtype (None: fp32)."""


def time_steps(
    cfg: TrainConfig,
    base: nn.Module,
    batches: Sequence[Batch],
    precisions: Sequence[str],
    warmup: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Target tokens/s of each optimizer step after the first `warmup`, per precision of
    `precisions`, each training its own copy of `base` (left unchanged) on `batches` (on the
    model's device), interleaved step by step."""
    device = next(base.parameters()).device
    runs = {}
    for name in dict.fromkeys(precisions):
        model = copy.deepcopy(base)
        runs[name] = (
            loss_module(model, cfg),
            build_optimizer(model, cfg.optim),
            TRAINING_PRECISIONS[name],
        )
    noise = torch.Generator(device=device)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for i, batch in enumerate(batches):
        for name, (module, optimizer, dtype) in runs.items():
            module.train()
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = clock()
            with autocast(device, dtype):
                token_sum, length_sum = module(batch.src, batch.tgt, noise)
            objective(token_sum / batch.tgt_tokens, length_sum / batch.size, cfg).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= warmup:
                rates[name].append(batch.tgt_tokens / (clock() - start))
    return rates


def measured_precision(
    cfg: TrainConfig,
    base: nn.Module,
    batches: Sequence[Batch],
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[torch.dtype | None, dict[str, float]]:
    """bf16 autocast (torch.bfloat16) if it trained `base` at least as fast as fp32 on
    `batches` (the first `warmup` untimed), else None (fp32); and the median rates."""
    rates = time_steps(cfg, base, batches, ("fp32", "bf16"), warmup, clock)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    return (torch.bfloat16 if medians["bf16"] >= medians["fp32"] else None), medians


__all__ = ["TRAINING_PRECISIONS", "measured_precision", "time_steps"]
