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
from gmlm.errors import GmlmError
from gmlm.training.config import TrainConfig
from gmlm.training.objective import loss_module
from gmlm.training.optim import build_optimizer
from gmlm.training.step import LossWatch, optimizer_step

TRAINING_PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}
"""The precisions a training step can run in, by name: their autocast dtype (None: fp32)."""


def time_steps(
    cfg: TrainConfig,
    base: nn.Module,
    batches: Sequence[Batch],
    precisions: Sequence[str],
    warmup: int,
    clock: Callable[[], float] = time.perf_counter,
    group: int = 1,
) -> dict[str, list[float]]:
    """Target tokens/s per precision of `precisions`, each training its own copy of `base`
    (left unchanged) on `batches` (on the model's device) with the trainer's own step
    (:func:`gmlm.training.step.optimizer_step`): the first `warmup` steps untimed, then one
    rate per `group` consecutive steps, timed between two waits for the device (inside a group
    a GPU overlaps a step's launches with the previous step's work, as in training);
    precisions interleaved group by group. Batches left over from the last full group are
    not used."""
    device = next(base.parameters()).device
    runs = {}
    for name in dict.fromkeys(precisions):
        model = copy.deepcopy(base)
        runs[name] = (model, loss_module(model, cfg), build_optimizer(model, cfg.optim))
    noise = torch.Generator(device=device)
    watch = LossWatch(device)
    step = 0

    def train(name: str, group_batches: Sequence[Batch]) -> None:
        nonlocal step
        model, module, optimizer = runs[name]
        module.train()
        for batch in group_batches:
            step += 1
            optimizer_step(
                cfg,
                model,
                module,
                optimizer,
                [batch],
                (batch.tgt_tokens, batch.size),
                lr=cfg.optim.lr,
                dtype=TRAINING_PRECISIONS[name],
                noise=noise,
                watch=watch,
                step=step,
            )

    def wait() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    rates: dict[str, list[float]] = {name: [] for name in runs}
    for batch in batches[:warmup]:
        for name in runs:
            train(name, [batch])
    timed = batches[warmup:]
    for first in range(0, len(timed) - group + 1, group):
        block = timed[first : first + group]
        for name in runs:
            wait()
            start = clock()
            train(name, block)
            wait()
            rates[name].append(sum(b.tgt_tokens for b in block) / (clock() - start))
    found = watch.check()
    if found is not None:
        raise GmlmError(
            f"non-finite loss while timing training steps (step {found.step}): the timing "
            "means nothing; lower optim.lr"
        )
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
