"""Which precision an unset setting means on a device (CPU model and versions: gmlm.provenance)."""

from __future__ import annotations

import torch


def bf16_by_default(device: torch.device) -> bool:
    """Whether an unset precision means bf16 autocast: on a CUDA GPU with bf16 support, never on
    a CPU. Decided by the device type alone, not by CPU flags, so that training and distillation
    give the same results on every CPU; whether bf16 pays on a CPU is measured (`gmlm
    throughput`, `gmlm bench --precision fp32,bf16`), then asked for explicitly."""
    return device.type == "cuda" and bool(torch.cuda.is_bf16_supported())
