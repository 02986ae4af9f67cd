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


def bf16_is_fast(device: torch.device) -> bool:
    """Whether bf16 autocast is likely to speed inference up here: CUDA with bf16 support, or a
    CPU that reports AMX or AVX512-BF16 (without them bf16 matmuls are emulated, slower than
    fp32). A guess from the CPU flags, not a measurement: `gmlm bench` measures both."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return bool(cpu_flags() & {"amx_bf16", "avx512_bf16"})
