"""Optimizers and learning-rate schedules.

Schedules are pure functions of the step (no scheduler object), so resuming a run needs only
the step number.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gmlm.training.config import OptimConfig


def lr_at(step: int, cfg: OptimConfig, max_steps: int) -> float:
    """Learning rate for optimizer step `step` (1-based): linear warm-up, then the schedule."""
    warmup = cfg.warmup_steps
    if warmup and step <= warmup:
        return cfg.lr * step / warmup
    if cfg.schedule == "constant":
        return cfg.lr
    if cfg.schedule == "inverse_sqrt":
        return cfg.lr * math.sqrt(max(warmup, 1) / step)
    span = max(max_steps - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * progress))


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """AdamW (fused on a GPU) or Adafactor; no weight decay on biases, LayerNorm weights and
    embeddings."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        is_matrix = param.ndim >= 2 and "embed" not in name and "table" not in name
        (decay if is_matrix else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if cfg.name == "adafactor":
        return torch.optim.Adafactor(groups, lr=cfg.lr)
    # On a GPU, one fused kernel updates every parameter (instead of a few per tensor): the
    # same update up to float rounding. The CPU keeps torch's default (its results unchanged).
    on_gpu = bool(decay or no_decay) and all(p.is_cuda for p in (*decay, *no_decay))
    return torch.optim.AdamW(
        groups,
        lr=cfg.lr,
        betas=(cfg.betas[0], cfg.betas[1]),
        eps=cfg.eps,
        fused=True if on_gpu else None,
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
