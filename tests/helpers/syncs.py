"""Counting host reads of device values: what would make a GPU's host wait (a sync) or a CUDA
graph fail to record. Used by the fixed-shape decoding tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

# What reads a device tensor's value on the host (a sync on a GPU) or gives a shape that
# depends on data: counted by operator, and Tensor.tolist / .cpu / .item by call.
SYNCING = {
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::is_nonzero",
    "aten::equal",
    "aten::unique",
    "aten::_unique2",
}


class _Syncs(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func._schema.name
        if name in SYNCING:
            self.seen[name] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting_syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    seen: Counter[str] = Counter()
    for method in ("tolist", "cpu", "item"):
        original = getattr(torch.Tensor, method)

        def counted(self, *args, _name=method, _original=original, **kwargs):  # type: ignore[no-untyped-def]
            seen[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, method, counted)
    mode = _Syncs()
    with mode:
        yield seen
    seen.update(mode.seen)
    monkeypatch.undo()
