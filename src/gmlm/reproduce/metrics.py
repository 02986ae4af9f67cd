"""The validation records of a training run's metrics.jsonl (the report's training section and
curves, the training ablation's rows)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def validations(path: Path) -> list[dict[str, Any]]:
    """The validation records of a run's metrics.jsonl, one per step (the last one written
    wins: a resumed run may repeat steps). The trainer's metric records are open-ended (each
    objective logs its own losses); validation ones carry `step`, `valid_loss` and, when
    validation decodes, `valid_bleu`."""
    if not path.is_file():
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else {}
        if "valid_loss" in record:
            by_step[int(record["step"])] = record
    return [by_step[k] for k in sorted(by_step)]
