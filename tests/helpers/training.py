"""Short training runs on the tiny presets, and reading what they wrote: shared by the trainer
and compile tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from gmlm.training.config import load_train_config
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
