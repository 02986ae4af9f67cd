"""A training run's own checkpoint state: what resuming needs, beside the inference files
(`gmlm.checkpoint`), and which folders a run may train into.

The `last` checkpoint of a run also holds the training state needed for an exact resume:

    optimizer.safetensors + optimizer.json   optimizer tensors / everything else
    state.safetensors                        RNG states (torch, CUDA, PaDIR noise generator)
    state.json                               step, data iterator position, clock, best
                                             validation, and whether the validation of
                                             its step is still to come

(`last` is written before the validation of its step; once that is done, its state.json alone
is replaced, atomically, by one that records the outcome.)
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from gmlm.checkpoint.files import CONFIG_FILE, load_json, load_tensors, save_tensors
from gmlm.config import load_saved_config, to_dict
from gmlm.data.binarized import MANIFEST
from gmlm.errors import GmlmError
from gmlm.io import (  # MODEL_FILE, RUN_CHECKPOINTS: declared torch-free, for path checks
    LOCK_FILE,
    MODEL_FILE,
    RUN_CHECKPOINTS,
    atomic_write_json,
    check_not_protected,
    is_run_folder,
    restore_replaced,
)
from gmlm.training.config import TrainConfig


def check_run_folder(run: Path) -> bool:
    """Whether `out=run` may take a training run; True when it holds one to resume.

    A run folder is what `gmlm train` writes: the resolved `config.yaml` beside `metrics.jsonl`
    (written from the first step) or the `last/` checkpoint, and `best/`, `history/`, ... Other
    files in it are left alone. Training starts in a missing or empty folder, resumes in a run
    folder that has a `last/` checkpoint (starts over in one that has none yet) and refuses
    anything else, saying what it looks like: training writes its own `config.yaml`, so a
    checkpoint folder would stop loading and a dataset folder would lose its settings.
    """
    if run.exists() and not run.is_dir():
        raise GmlmError(f"out={run} is a file, not a folder; choose a folder path for the run")
    entries = sorted(p.name for p in run.iterdir() if p.name != LOCK_FILE) if run.exists() else []
    if not entries:
        check_not_protected(run, "out=")
        return False
    if (run / MODEL_FILE).is_file():
        raise GmlmError(
            f"out={run} is a checkpoint folder (it holds {MODEL_FILE}), not a run folder: "
            "training into it would replace its config.yaml and it would no longer load; "
            "choose a new out= folder"
        )
    if (run / MANIFEST).is_file():
        raise GmlmError(
            f"out={run} is a prepared dataset folder (it holds {MANIFEST}), not a run folder: "
            "pass it as data= and choose a new out= folder"
        )
    if not is_run_folder(run):
        shown = ", ".join(entries[:5]) + (
            f" and {len(entries) - 5} more" if len(entries) > 5 else ""
        )
        raise GmlmError(
            f"out={run} exists and is not a gmlm run folder (it holds {shown}; a run folder "
            "holds the config.yaml and metrics.jsonl or last/ that `gmlm train` writes); "
            "choose a new or empty out= folder"
        )
    check_not_protected(run, "out=")
    for name in RUN_CHECKPOINTS:
        restore_replaced(run / name)  # a run killed while it replaced one
    return (run / "last" / MODEL_FILE).is_file()


def remove_stale(run_dir: Path) -> None:
    """Temporary folders left by a run that was killed while writing a checkpoint."""
    for stale in list(run_dir.glob(".*.tmp-*")) + list(run_dir.glob(".*.old-*")):
        shutil.rmtree(stale, ignore_errors=True)


def save_optimizer(tmp: Path, optimizer: torch.optim.Optimizer) -> None:
    state = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, entry in state["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{idx}.{name}"] = value.detach().contiguous()
            else:
                scalars.setdefault(str(idx), {})[name] = value
    save_tensors(tensors, tmp / "optimizer.safetensors")
    atomic_write_json(
        tmp / "optimizer.json", {"param_groups": state["param_groups"], "scalars": scalars}
    )


def load_optimizer(path: Path, optimizer: torch.optim.Optimizer) -> None:
    tensors = load_tensors(path / "optimizer.safetensors")
    meta = load_json(path / "optimizer.json")
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        idx, name = key.split(".", 1)
        state.setdefault(int(idx), {})[name] = value
    for idx, values in meta["scalars"].items():
        state.setdefault(int(idx), {}).update(values)
    try:
        optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    except (ValueError, KeyError) as err:
        raise GmlmError(f"{path}: optimizer state does not match the model ({err})") from None


def read_config(path: Path) -> TrainConfig:
    """The whole TrainConfig saved in checkpoint folder `path` (what resuming checks against;
    inference reads the model part, `gmlm.checkpoint.config`); errors name the file."""
    return load_saved_config(TrainConfig, path / CONFIG_FILE)


def check_resume_compatible(saved: TrainConfig, new: TrainConfig, where: Path) -> None:
    """Resuming must not change the model or the objective; schedule changes are allowed."""
    if saved.kind != new.kind:
        raise GmlmError(
            f"{where}: the run was trained as kind={saved.kind}, not {new.kind}; "
            "use another out= folder"
        )
    old_model, new_model = to_dict(saved.model), to_dict(new.model)
    changed = [
        f"model.{k}: {old_model[k]} -> {new_model[k]}"
        for k in old_model
        if old_model[k] != new_model[k]
    ]
    if changed:
        raise GmlmError(
            f"{where}: cannot resume with a changed model shape ({'; '.join(changed)});"
            " use another out= folder or restore the settings"
        )
