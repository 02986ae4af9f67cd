"""Where a speed number was measured: CPU model and instruction-set hints."""

from __future__ import annotations

import platform
from pathlib import Path

import torch


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def bf16_by_default(device: torch.device) -> bool:
    """Whether an unset precision means bf16 autocast: on a CUDA GPU with bf16 support, never on
    a CPU. Decided by the device type alone, not by CPU flags, so that training and distillation
    give the same results on every CPU; whether bf16 pays on a CPU is measured (`gmlm
    throughput`, `gmlm bench --precision fp32,bf16`), then asked for explicitly."""
    return device.type == "cuda" and bool(torch.cuda.is_bf16_supported())
