"""One optimizer step that never reads a device value on the host.

On a GPU the host queues kernels ahead of the device. A host read of a device value
(``float(loss)``, ``.item()``, ``if torch.isfinite(loss)``) makes the host wait until the
queue has drained, so the next step's launches stop overlapping this step's arithmetic; for
models of gmlm's size, where launching costs as much as computing, that halves the rate or
worse. So a step leaves its numbers on the device:

* :class:`StepValues` holds the summed losses and the gradient norm as device tensors; the
  trainer reads them (:meth:`StepValues.read`) only on the steps it logs;
* :class:`LossWatch` records on the device the first micro-batch whose loss was not finite,
  and the host looks once per check (every logged step and before every save): the run stops
  there, naming the step and lines where it first happened. The steps between a bad loss and
  the check are lost with it; no checkpoint is written after it.

:func:`optimizer_step` is the step itself, shared by the trainer and the throughput
measurement (gmlm.training.step_timing), so that what `gmlm throughput` times is what training
runs. Batches reach a GPU from pinned memory without waiting (:meth:`gmlm.data.batching.Batch.to`
with ``non_blocking``).

Under torchrun the same holds: the loss's normalisers (the target tokens and sentences of all
processes' micro-batches) come with each batch (:attr:`gmlm.data.batching.Batch.all_tgt_tokens`,
every process's batch being a share of one global batch), and the per-step stop question goes
through a gloo group on the host (:func:`gmlm.distributed.all_reduce_sum`), so a step's only
collective on the device is DDP's gradient all-reduce.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from gmlm.data.batching import Batch
from gmlm.distributed import DistInfo, all_reduce_sum
from gmlm.training.config import TrainConfig
from gmlm.training.objective import objective
from gmlm.training.optim import set_lr
from gmlm.training.precision import autocast


@dataclass(frozen=True)
class NonFinite:
    """Where a loss was first not finite: the optimizer step (1-based), the micro-batch in
    it, and that micro-batch's dataset rows."""

    step: int
    micro_batch: int
    rows: Tensor


class LossWatch:
    """The first non-finite loss since the last :meth:`check`, recorded on the device."""

    def __init__(self, device: torch.device) -> None:
        self.first = torch.full((), -1, dtype=torch.long, device=device)
        self.pending: list[NonFinite] = []

    def record(self, loss: Tensor, where: NonFinite) -> None:
        """Note `loss` (0-dim) of the micro-batch `where`; no host read."""
        code = len(self.pending)
        self.pending.append(where)
        unseen = ~torch.isfinite(loss.detach()) & (self.first < 0)
        self.first = torch.where(unseen, code, self.first)

    def check(self) -> NonFinite | None:
        """The first non-finite loss recorded since the last check, if any (the one host
        read); the record starts over."""
        if not self.pending:
            return None
        first = int(self.first)
        found = self.pending[first] if first >= 0 else None
        self.pending.clear()
        self.first = torch.full_like(self.first, -1)
        return found


@dataclass(frozen=True)
class StepValues:
    """One optimizer step's numbers: the token and length losses summed over its micro-batches
    (device tensors, this process's share), the global target tokens and sentences, the
    learning rate, and the gradient norm before clipping (a device tensor; None without
    clipping)."""

    token_sum: Tensor
    length_sum: Tensor
    tokens: float
    sentences: float
    lr: float
    grad_norm: Tensor | None

    def read(self, cfg: TrainConfig, dist: DistInfo) -> dict[str, float]:
        """The logged row's numbers, summed over processes: host reads (a sync on a GPU)."""
        token_total, length_total = all_reduce_sum(
            [float(self.token_sum), float(self.length_sum)], dist
        )
        token_loss, length_loss = token_total / self.tokens, length_total / self.sentences
        return {
            "loss": float(objective(token_loss, length_loss, cfg)),
            "token_loss": token_loss,
            "length_loss": length_loss,
            "lr": self.lr,
            "grad_norm": float("nan") if self.grad_norm is None else float(self.grad_norm),
        }


def optimizer_step(
    cfg: TrainConfig,
    model: nn.Module,
    loss_module: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro: Sequence[Batch],
    totals: tuple[float, float],
    *,
    lr: float,
    dtype: torch.dtype | None,
    noise: torch.Generator | None,
    watch: LossWatch,
    step: int,
    world_size: int = 1,
) -> StepValues:
    """Optimizer step `step` (1-based) of `model`, through its `loss_module` (compiled or
    wrapped by DDP, or not), over the micro-batches `micro` (on the device), whose
    target tokens and sentences over every process are `totals`: the gradient of their summed
    losses over those totals, clipped at cfg.optim.clip_norm, then the update at `lr`. No host
    read of a device value (module docstring)."""
    tokens, sentences = totals
    device = micro[0].src.device
    # Summed in float64, as the host summed them when it read every micro-batch's losses.
    token_total = torch.zeros((), dtype=torch.float64, device=device)
    length_total = torch.zeros((), dtype=torch.float64, device=device)
    for i, batch in enumerate(micro):
        sync: Any = nullcontext()
        if isinstance(loss_module, DistributedDataParallel) and i + 1 < len(micro):
            sync = loss_module.no_sync()
        with sync:
            with autocast(device, dtype):
                token_sum, length_sum = loss_module(batch.src, batch.tgt, noise)
            # DDP averages gradients over processes: scale back to the sum.
            loss = world_size * objective(token_sum / tokens, length_sum / sentences, cfg)
            watch.record(loss, NonFinite(step, i, batch.indices))
            loss.backward()
        token_total = token_total + token_sum.detach().double()
        length_total = length_total + length_sum.detach().double()
    set_lr(optimizer, lr)
    grad_norm = None
    if cfg.optim.clip_norm > 0:
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.clip_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return StepValues(token_total, length_total, tokens, sentences, lr, grad_norm)


__all__ = ["LossWatch", "NonFinite", "StepValues", "optimizer_step"]
