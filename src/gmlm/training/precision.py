"""Training precision: which autocast dtype a run uses, and the context that applies it.

Shared by the trainer, validation and the throughput benchmark; what a device defaults to
(`gmlm.distributed.bf16_by_default`) is distillation's too.
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from gmlm.distributed import bf16_by_default
from gmlm.errors import GmlmError
from gmlm.training.config import TrainConfig


def resolve_precision(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for fp32.

    precision=auto is fp32 on every CPU and bf16 on GPUs that support it (see
    :func:`bf16_by_default`); precision=bf16 on a CPU is taken as asked
    (`gmlm throughput` measures whether it pays on the machine at hand).
    """
    if cfg.precision == "fp32":
        return None
    if cfg.precision == "auto":
        return torch.bfloat16 if bf16_by_default(device) else None
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise GmlmError("precision=bf16 requested but this GPU does not support bf16")
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype | None) -> Any:
    """The autocast context for `dtype` on `device`; a no-op context for fp32 (None)."""
    if dtype is None:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


PRECISION_KEY = "precision"
"""The key of the trainer's metrics.jsonl records (training and validation rows) that names
what the run trained in up to that step: "fp32" or "bf16"."""


def precision_name(dtype: torch.dtype | None) -> str:
    """ "bf16" for bf16 autocast, "fp32" for none (what metrics.jsonl records)."""
    return "fp32" if dtype is None else "bf16"


def trained_precision(metrics: Path, step: int) -> str | None:
    """The precision of the last record of a run's metrics.jsonl at or before `step` (a run
    resumed on another machine may have changed precision), or None when none says."""
    found = None
    if metrics.is_file():
        for line in metrics.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if PRECISION_KEY in record and int(record.get("step", step + 1)) <= step:
                found = str(record[PRECISION_KEY])
    return found
