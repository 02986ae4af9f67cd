"""Checkpoint averaging: the element-wise mean of a run's history weights, written as a
checkpoint folder.

A run keeps the weights of its last `keep_history` validations in `history/` (one file a step,
`history_file`). Training averages the newest `average_last` of them into the run's
`averaged/` when it ends; `gmlm average` (:func:`average_run`) averages any range of the kept
steps into a folder of its own, for instance the steps that ended a shorter schedule
(8,000 to 10,000 of a run that goes on to 20,000), so that a run can be compared with itself
at an earlier point as its own `averaged/` would have been there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gmlm.checkpoint.files import (
    fill_inference_files,
    load_checkpoint_tokenizer,
    load_tensors,
    write_checkpoint_dir,
)
from gmlm.checkpoint.meta import Meta
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.io import MODEL_FILE, is_run_folder
from gmlm.locking import output_folder
from gmlm.models import build_model
from gmlm.training.average_settings import AverageSettings
from gmlm.training.checkpoint import read_config
from gmlm.training.config import TrainConfig

HISTORY_DIR = "history"
_HISTORY_NAME = re.compile(r"step-(\d{8})\.safetensors")


def history_file(run: Path, step: int) -> Path:
    """The file of `run`'s history that holds the weights of `step`."""
    return Path(run) / HISTORY_DIR / f"step-{step:08d}.safetensors"


def history_steps(run: Path) -> dict[int, Path]:
    """The steps whose weights `run`'s history keeps, in order, each with its file."""
    folder = Path(run) / HISTORY_DIR
    found = {}
    for path in folder.iterdir() if folder.is_dir() else []:
        match = _HISTORY_NAME.fullmatch(path.name)
        if match and path.is_file():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def average_weights(paths: Sequence[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of several weight files (checkpoint averaging)."""
    if not paths:
        raise GmlmError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        tensors = load_tensors(path)
        if total and set(tensors) != set(total):
            raise GmlmError(f"{path}: holds different tensors from {paths[0]}")
        for key, value in tensors.items():
            total[key] = total[key] + value.double() if key in total else value.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}


def write_averaged(
    out: Path,
    files: Sequence[Path],
    cfg: TrainConfig,
    tokenizer: Tokenizer,
    meta: Mapping[str, Any],
) -> None:
    """The mean of the weight `files` as the checkpoint folder `out` (written atomically), its
    meta.json `meta` with the files averaged (Meta.averaged)."""
    model = build_model(cfg.kind, cfg.model)
    model.load_state_dict(average_weights(files), strict=False)
    record = {**meta, "averaged": [f.name for f in files]}
    write_checkpoint_dir(out, lambda tmp: fill_inference_files(tmp, model, cfg, tokenizer, record))


@dataclass(frozen=True)
class Averaged:
    """What :func:`average_run` wrote: the folder and the steps it averages."""

    out: Path
    steps: tuple[int, ...]


def average_run(
    run: str | Path, out: str | Path, settings: AverageSettings | None = None
) -> Averaged:
    """Average the weights `run`'s history keeps at steps `settings.first` to `.last`
    (inclusive; None: from the oldest kept, to the newest) into the new checkpoint folder
    `out`, as the run's own `average_last` would have at step `last`: its configuration and
    tokenizer are those of its `last` checkpoint, its meta.json's step is the newest step
    averaged."""
    settings = settings or AverageSettings()
    settings.validate()
    run, target = Path(run), Path(out)
    if not is_run_folder(run) or not (run / "last" / MODEL_FILE).is_file():
        raise GmlmError(
            f"{run}: not a training run folder with a `last` checkpoint (what `gmlm train "
            "out=...` writes); to average, give the run folder itself"
        )
    kept = history_steps(run)
    if not kept:
        raise GmlmError(
            f"{run}: its history keeps no weights ({HISTORY_DIR}/ is empty or missing); a run "
            "keeps the weights of its last keep_history validations (keep_history > 0)"
        )
    low = min(kept) if settings.first is None else settings.first
    high = max(kept) if settings.last is None else settings.last
    steps = tuple(step for step in kept if low <= step <= high)
    if not steps:
        raise GmlmError(
            f"{run}: no kept weights between steps {low} and {high}; its history keeps "
            f"{len(kept)} step(s), {min(kept)} to {max(kept)}: {_listed(kept)}"
        )
    with output_folder(
        target,
        "--out",
        "an averaged checkpoint",
        lambda _f: False,
        inputs={"--run": run},
        replace=False,
    ):
        cfg = read_config(run / "last")
        tokenizer = load_checkpoint_tokenizer(run / "last")
        meta = Meta.of(run / "last").updated(step=steps[-1]).to_json()
        write_averaged(target, [kept[s] for s in steps], cfg, tokenizer, meta)
    return Averaged(target, steps)


def _listed(steps: Mapping[int, Path]) -> str:
    shown = [str(s) for s in steps]
    return ", ".join(shown if len(shown) <= 8 else [*shown[:4], "...", *shown[-3:]])
