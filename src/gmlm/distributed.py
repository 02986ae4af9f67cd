"""Devices and processes, for training and distillation alike: the device a `device=` setting
names, whether it computes in bf16 by default, and multi-process data parallelism under
`torchrun` (gloo on CPU, NCCL on CUDA, and a gloo group beside NCCL for values the host holds:
summing a few host numbers through the GPU would make the host wait for everything queued
there)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from gmlm.errors import GmlmError


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    # a gloo process group over every process, for host values (None: the default group)
    host_group: Any = field(default=None, compare=False, repr=False)

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def pick_device(name: str) -> torch.device:
    """The device a `device=` setting names: auto (the first GPU when CUDA is available, else
    the CPU), cpu, cuda or cuda:N."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise GmlmError(f"device={name} requested but CUDA is not available; use device=cpu")
    return device


def bf16_by_default(device: torch.device) -> bool:
    """Whether an unset precision means bf16 autocast: on a CUDA GPU with bf16 support, never on
    a CPU. Decided by the device type alone, not by CPU flags, so that training and distillation
    give the same results on every CPU; whether bf16 pays on a CPU is measured (`gmlm
    throughput`, `gmlm bench --precision fp32,bf16`), then asked for explicitly."""
    return device.type == "cuda" and bool(torch.cuda.is_bf16_supported())


def process_device(device: torch.device) -> torch.device:
    """This process's device: under `torchrun` with several processes, a CUDA device becomes
    the GPU of the process's local rank, and a rank with no GPU of its own is an error (before
    joining the process group, where it would fail deep inside NCCL); else `device`."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or device.type != "cuda":
        return device
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise GmlmError(
            f"process {local_rank} of this node needs a GPU of its own, but {count} "
            f"{'is' if count == 1 else 'are'} visible: start at most {count} per node "
            f"(torchrun --nproc_per_node {count}), or train on the CPU with device=cpu"
        )
    return torch.device(f"cuda:{local_rank}")


def init_distributed(device: torch.device) -> DistInfo:
    """Join the process group that `torchrun` describes in the environment (if any)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, world, local = (
        dist.get_rank(),
        dist.get_world_size(),
        int(os.environ.get("LOCAL_RANK", "0")),
    )
    # Created on every backend (not only beside NCCL), so that the CPU's tests run this path.
    return DistInfo(rank, world, local, host_group=dist.new_group(backend="gloo"))


def all_reduce_sum(values: list[float], info: DistInfo) -> list[float]:
    """Sum a few host floats over all processes (identity with one process), on the host:
    through the gloo group, never waiting for a GPU."""
    if not info.active:
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, group=info.host_group)
    return [float(v) for v in tensor.tolist()]


def barrier(info: DistInfo) -> None:
    if info.active:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.active and dist.is_initialized():
        dist.destroy_process_group()
