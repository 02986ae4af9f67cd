"""Checkpoints: safetensors weights (no pickle), the resolved config and the tokenizer.

A checkpoint folder is self-contained, so it alone can translate raw text:

    model.safetensors   weights (fp32, or bf16 for exported checkpoints)
    config.yaml         the resolved TrainConfig (model kind and sizes included)
    tokenizer/          the SentencePiece model the data was prepared with
    meta.json           step, validation scores, versions
    decoding.json       optional: this model's own decoding defaults, chosen on validation
                        data (`gmlm.decoding.checkpoint_defaults`)

The `last` checkpoint of a run also holds the training state needed for an exact resume:

    optimizer.safetensors + optimizer.json   optimizer tensors / everything else
    state.safetensors                        RNG states (torch, CUDA, PaDIR noise generator)
    state.json                               step, data iterator position, clock, best
                                             validation, and whether the validation of
                                             its step is still to come

Every folder is written to a temporary sibling and renamed into place, so a crash (even
`kill -9`) leaves either the previous checkpoint or the new one, never a mix. (`last` is
written before the validation of its step; once that is done, its state.json alone is
replaced, atomically, by one that records the outcome.)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

from gmlm.config import load_saved_config, save_config, to_dict
from gmlm.data.binarized import MANIFEST
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.checkpoint_defaults import DECODING_FILE, read_decoding_defaults
from gmlm.errors import GmlmError
from gmlm.io import (  # MODEL_FILE, RUN_CHECKPOINTS: declared torch-free, for path checks
    LOCK_FILE,
    MODEL_FILE,
    RUN_CHECKPOINTS,
    atomic_write_json,
    check_not_protected,
    check_output_folder,
    current_umask,
    is_run_folder,
    make_dirs,
    replace_dir,
    restore_replaced,
    writing,
)
from gmlm.models import build_model
from gmlm.nn.config import ModelConfig
from gmlm.training.config import TrainConfig


@dataclass
class LoadedModel:
    """What inference needs: the model (eval mode), its tokenizer and its configuration."""

    kind: Literal["ar", "padir"]
    model: nn.Module
    tokenizer: Tokenizer
    config: TrainConfig
    path: Path
    decoding: dict[str, Any] = field(default_factory=dict)  # the folder's decoding.json

    @property
    def model_config(self) -> ModelConfig:
        return self.config.model


def write_checkpoint_dir(path: Path, fill: Callable[[Path], None]) -> None:
    """Create `path` atomically: `fill(tmp)` writes a temporary folder that then replaces it.
    A failed write (a full disk) is a WriteError naming `path`, which is left as it was."""
    make_dirs(path.parent, f"cannot write {path}")
    with writing(path):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            with safetensors_errors():
                fill(tmp)
            tmp.chmod(0o777 & ~current_umask())
            replace_dir(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


@contextmanager
def safetensors_errors() -> Iterator[None]:
    """safetensors reports a failed write (a full disk) as a SafetensorError that quotes the
    system's error number; raise it as that OSError, which `gmlm.io.writing` names."""
    try:
        yield
    except SafetensorError as err:
        code = re.search(r"\(os error (\d+)\)", str(err))
        if code is None:
            raise
        number = int(code.group(1))
        raise OSError(number, os.strerror(number)) from err


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


def fill_inference_files(
    tmp: Path,
    model: nn.Module,
    cfg: TrainConfig,
    tokenizer: Tokenizer,
    meta: dict[str, Any],
    dtype: torch.dtype | None = None,
) -> None:
    """Write weights, config, tokenizer and meta into the folder `tmp`."""
    if dtype is None:
        save_model(model, str(tmp / MODEL_FILE))
    else:
        state = {k: v.detach().to(dtype).contiguous() for k, v in _unique_state(model).items()}
        save_file(state, str(tmp / MODEL_FILE))
    save_config(cfg, tmp / "config.yaml")
    tokenizer.save(tmp / "tokenizer")
    atomic_write_json(tmp / "meta.json", meta)


def _unique_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict without the second name of tied parameters (what save_model keeps)."""
    seen: set[int] = set()
    out = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen.add(key)
        out[name] = tensor
    return out


def save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(path))


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
    save_file(tensors, str(tmp / "optimizer.safetensors"))
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


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise GmlmError(f"{path}: missing; the checkpoint is incomplete")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise GmlmError(f"{path}: corrupt or truncated safetensors file ({err})") from None


def load_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise GmlmError(f"{path}: missing; the checkpoint is incomplete")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise GmlmError(f"{path}: corrupt JSON ({err})") from None
    if not isinstance(data, dict):
        raise GmlmError(f"{path}: corrupt checkpoint metadata")
    return data


def load_weights(model: nn.Module, path: Path) -> None:
    """Load `path`/model.safetensors into `model`, with errors that name the mismatch."""
    file = path / MODEL_FILE
    tensors = load_tensors(file)
    own = model.state_dict()
    shapes = {k: tuple(v.shape) for k, v in own.items()}
    mismatched = [
        f"{k}: checkpoint {tuple(v.shape)} vs model {shapes[k]}"
        for k, v in tensors.items()
        if k in shapes and tuple(v.shape) != shapes[k]
    ]
    if mismatched:
        raise GmlmError(f"{file}: weights do not fit the model shape: " + "; ".join(mismatched[:5]))
    # A diverged run can save NaN weights; they would decode to garbage without any error.
    broken = [k for k, v in tensors.items() if v.is_floating_point() and not v.isfinite().all()]
    if broken:
        raise GmlmError(
            f"{file}: {len(broken)} weight tensor(s) hold NaN or infinite values "
            f"({', '.join(sorted(broken)[:5])}{', ...' if len(broken) > 5 else ''}) and are "
            "unusable (did training diverge?): use an earlier checkpoint, or train again with "
            "a lower optim.lr"
        )
    try:
        missing, unexpected = load_model(model, str(file), strict=False)
    except (SafetensorError, OSError, RuntimeError) as err:
        raise GmlmError(f"{file}: cannot load weights ({err})") from None
    if unexpected or [m for m in missing if m not in _tied_aliases(model)]:
        raise GmlmError(
            f"{file}: weights do not match the model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )


def _tied_aliases(model: nn.Module) -> set[str]:
    names = list(model.state_dict())
    return set(names) - set(_unique_state(model))


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, or a run folder (then its `best`, else `averaged`, else `last`)."""
    path = Path(path)
    if not path.exists():
        raise GmlmError(f"checkpoint not found: {path}")
    if (path / MODEL_FILE).is_file():
        return path
    for name in ("best", "averaged", "last"):
        if (path / name / MODEL_FILE).is_file():
            return path / name
    raise GmlmError(f"{path}: not a checkpoint (no {MODEL_FILE}) nor a run folder with one")


def read_config(path: Path) -> TrainConfig:
    """The TrainConfig saved in checkpoint folder `path`; errors name the file."""
    return load_saved_config(TrainConfig, path / "config.yaml")


def load_for_inference(path: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a checkpoint (or a run folder's best one) for translation, in eval mode."""
    ckpt = resolve_checkpoint(path)
    cfg = read_config(ckpt)
    if not (ckpt / "tokenizer").is_dir():
        raise GmlmError(f"{ckpt}: missing tokenizer/ folder; the checkpoint is incomplete")
    tokenizer = Tokenizer.load(ckpt / "tokenizer")
    model = build_model(cfg.kind, cfg.model)
    load_weights(model, ckpt)
    model.to(device).eval()
    decoding = read_decoding_defaults(ckpt, cfg.kind, cfg.model)
    return LoadedModel(cfg.kind, model, tokenizer, cfg, ckpt, decoding)


def checkpoint_fingerprint(folder: Path) -> str:
    """A digest of what decides a checkpoint's translations: its weights, its tokenizer and its
    decoding defaults (decoding.json, if any); equal digests, equal outputs."""
    digest = hashlib.sha256()
    for name in (MODEL_FILE, "tokenizer/tokenizer.model", DECODING_FILE):
        path = folder / name
        digest.update(name.encode() + b"\0")
        if path.is_file():
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


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


def is_export(folder: Path) -> bool:
    """Whether `folder` holds a checkpoint that `export_checkpoint` wrote (what `gmlm export
    --force` may replace): its meta.json records where it was exported from."""
    meta = folder / "meta.json"
    if not ((folder / MODEL_FILE).is_file() and meta.is_file()):
        return False
    try:
        return "exported_from" in load_json(meta)
    except GmlmError:
        return False


def export_checkpoint(
    source: str | Path, out: str | Path, dtype: torch.dtype | None, *, force: bool = False
) -> Path:
    """Copy the inference files of a checkpoint (or a run folder's best one) to `out`, its
    decoding.json included, with the weights cast to `dtype` (e.g. torch.bfloat16 halves the
    size; None keeps fp32).

    Loading casts them back to the model's fp32 parameters, so `gmlm translate` and `gmlm
    bench` take an exported folder like any checkpoint. `out` is written atomically; it must
    be new or empty, or with `force` an earlier export, and never `source`, inside it or
    inside a checkpoint or training run folder (`gmlm.io.check_output_folder`)."""
    target = Path(out)
    check_output_folder(
        target,
        "--out",
        "a gmlm export",
        is_export,
        inputs={"--checkpoint": Path(source)},
        replace=force,
    )
    loaded = load_for_inference(source)
    meta = load_json(loaded.path / "meta.json") if (loaded.path / "meta.json").is_file() else {}
    meta = {**meta, "exported_from": str(loaded.path), "weights_dtype": str(dtype or "fp32")}

    def fill(tmp: Path) -> None:
        fill_inference_files(tmp, loaded.model, loaded.config, loaded.tokenizer, meta, dtype)
        if (loaded.path / DECODING_FILE).is_file():
            shutil.copyfile(loaded.path / DECODING_FILE, tmp / DECODING_FILE)

    write_checkpoint_dir(target, fill)
    return target
