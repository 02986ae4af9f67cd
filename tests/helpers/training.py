"""Short training runs on the tiny presets, reading what they wrote, and a fake clock for timed
steps: shared by the trainer, step and compile tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from gmlm.training.config import load_train_config
from gmlm.training.objective import LossModule
from gmlm.training.trainer import Trainer

FAST = ["valid_sentences=0", "log_every=1", "threads=1"]


def train(data: Path, out: Path, kind: str = "ar", *extra: str, log: Any = lambda _m: None) -> Any:
    """A tiny-`kind` run on `data` into `out` with FAST and `extra` overrides; its result."""
    cfg = load_train_config(f"tiny-{kind}", [f"data={data}", f"out={out}", *FAST, *extra])
    return Trainer(cfg, progress=False, log=log).run()


def weights(path: Path) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint folder."""
    return load_file(str(Path(path) / "model.safetensors"))


def metrics(run: Path) -> list[dict[str, Any]]:
    """The rows of a run's metrics.jsonl."""
    return [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]


def fake_step_clock(
    monkeypatch: Any, seconds: Callable[[str, int], float]
) -> tuple[dict[str, list[int]], Callable[[], float]]:
    """A clock that moves only inside the loss forward, by `seconds(precision, call)` on the
    call-th forward (0-based) of that precision ("fp32" or "bf16" autocast), and the target
    tokens of each precision's forwards, in order: for timing statistics checked exactly."""
    tokens: dict[str, list[int]] = {"fp32": [], "bf16": []}
    now = [0.0]
    forward = LossModule.forward

    def timed(module, src, tgt, generator):  # type: ignore[no-untyped-def]
        out = forward(module, src, tgt, generator)
        name = "bf16" if torch.is_autocast_enabled("cpu") else "fp32"
        now[0] += seconds(name, len(tokens[name]))
        tokens[name].append(int((tgt != module.cfg.model.pad_id).sum()))
        return out

    monkeypatch.setattr(LossModule, "forward", timed)
    return tokens, lambda: now[0]
