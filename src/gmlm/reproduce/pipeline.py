"""`gmlm reproduce`: run the stages in order, skipping those already complete.

The run folder holds `reproduce.yaml` (the resolved config) and `stages/NAME.json`, written
when a stage finishes (its summary and wall-clock seconds). A rerun with the same config skips
finished stages and resumes an interrupted one; a folder holding a different config is
refused, naming the keys that differ, so two presets never mix their outputs. One exception,
for long runs spread over days: with the same preset, the settings of a stage that has not
started yet (neither finished nor written its folder) may change, e.g. PaDIR's recipe while
the teacher trains; the saved config then records the new settings. And a training stage that
has started may change its `max_steps`, to stop earlier or train longer, when its learning-rate
schedule does not depend on max_steps (inverse_sqrt, constant): the steps already taken are
then exactly those of a run planned with the new length.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gmlm.config import ConfigError, load_config, save_config, to_dict
from gmlm.errors import GmlmError
from gmlm.io import make_dirs
from gmlm.provenance import host
from gmlm.reproduce import stages
from gmlm.reproduce.config import STAGES, ReproduceConfig
from gmlm.reproduce.stage_record import StageRecord

CONFIG_FILE = "reproduce.yaml"
TRAINING_STAGES = ("teacher", "ar", "padir")
# Settings that may change between a run and its resumption: they do not change results.
RESUMABLE_KEYS = ("threads", "description")

STAGE_FUNCTIONS: dict[str, Callable[[stages.Context], dict[str, Any]]] = {
    "theory": stages.theory,
    "data": stages.data,
    "teacher": stages.teacher,
    "distill": stages.distill,
    "ar": stages.ar,
    "padir": stages.padir,
    "evaluate": stages.evaluate,
    "bench": stages.bench,
    "attention": stages.attention,
    "report": stages.report,
}
# What each stage reads from earlier stages.
NEEDS: dict[str, tuple[str, ...]] = {
    "theory": (),
    "data": (),
    "teacher": ("data",),
    "distill": ("teacher",),
    "ar": ("distill",),
    "padir": ("distill",),
    "evaluate": ("teacher", "ar", "padir"),
    "bench": ("teacher", "ar", "padir"),
    "attention": ("padir",),
    "report": (),
}


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    return [prefix.rstrip(".")] if a != b else []


def check_run_folder(cfg: ReproduceConfig, out: Path) -> None:
    """Refuse a folder that holds another preset's (or another config's) run."""
    saved_path = out / CONFIG_FILE
    if not saved_path.is_file():
        if out.is_dir() and any(out.iterdir()):
            raise GmlmError(
                f"--out {out} exists, is not empty and holds no {CONFIG_FILE}: it is not a "
                "reproduction run; choose an empty or new folder"
            )
        return
    # Through the schema, so that settings added since (with their defaults) do not count.
    try:
        saved = to_dict(load_config(ReproduceConfig, saved_path))
    except ConfigError as err:
        raise GmlmError(
            f"--out {out}: its {CONFIG_FILE} does not fit this version of gmlm ({err}); use "
            "another --out"
        ) from None
    new = to_dict(cfg)
    diff = [key for key in _differences(saved, new) if key.split(".")[0] not in RESUMABLE_KEYS]
    if saved.get("preset") == cfg.preset:
        # The same preset, revised: settings of stages that have not started yet may change.
        diff = [key for key in diff if not _not_started(out, key.split(".")[0])]
        diff = [key for key in diff if not _only_budget(saved, new, key)]
    if diff:
        was = saved.get("preset", "?")
        other = f" (this is '{cfg.preset}')" if was != cfg.preset else ""
        raise GmlmError(
            f"--out {out} holds a run of preset '{was}'{other} with different settings "
            f"({', '.join(diff[:8])}{', ...' if len(diff) > 8 else ''}); use another --out, "
            f"or rerun with the same preset and overrides to resume it"
        )


def _only_budget(saved: dict[str, Any], new: dict[str, Any], key: str) -> bool:
    """Whether `key` is a training stage's overrides that differ only in max_steps, under a
    learning-rate schedule that max_steps does not shape (anything but cosine)."""
    section, _, rest = key.partition(".")
    if section not in TRAINING_STAGES or rest != "overrides":
        return False
    from gmlm.training.config import load_train_config

    try:
        old = load_train_config(saved[section]["preset"], saved[section]["overrides"])
        now = load_train_config(new[section]["preset"], new[section]["overrides"])
    except (ConfigError, GmlmError, KeyError, TypeError):
        return False
    if saved[section]["preset"] != new[section]["preset"] or "cosine" in (
        old.optim.schedule,
        now.optim.schedule,
    ):
        return False
    now.max_steps = old.max_steps
    return to_dict(old) == to_dict(now)


def stage_done(out: Path, name: str) -> bool:
    return (out / "stages" / f"{name}.json").is_file()


def _not_started(out: Path, section: str) -> bool:
    """Whether `section` is a stage that has neither finished nor written its folder."""
    return section in STAGES and not stage_done(out, section) and not (out / section).exists()


def run_reproduce(
    cfg: ReproduceConfig,
    out: str | Path,
    only: Sequence[str] = STAGES,
    *,
    redo: Sequence[str] = (),
    progress: bool = True,
    log: Callable[[str], None] = print,
) -> Path:
    """Run the stages `only` (pipeline order) of `cfg` in `out`; returns `out`.

    Finished stages are skipped unless named in `redo`. A stage whose inputs are missing is an
    error naming the stage to run first.
    """
    import torch

    out = Path(out)
    check_run_folder(cfg, out)
    make_dirs(out, f"--out {out}")
    save_config(cfg, out / CONFIG_FILE)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    ctx = stages.Context(cfg, out, progress, log)
    for name in STAGES:
        if name not in only:
            continue
        if stage_done(out, name) and name not in redo:
            log(
                f"[{name}] done already (remove {out / 'stages' / (name + '.json')} or pass "
                f"--redo {name} to run it again)"
            )
            continue
        missing = [n for n in NEEDS[name] if not stage_done(out, n)]
        if missing:
            raise GmlmError(
                f"stage '{name}' needs stage(s) {', '.join(missing)} first: run "
                f"`gmlm reproduce --preset {cfg.preset} --out {out} --stages "
                f"{','.join(missing)}` (or without --stages to run everything)"
            )
        log(f"[{name}] started {dt.datetime.now():%Y-%m-%d %H:%M:%S}")
        start = time.perf_counter()
        summary = STAGE_FUNCTIONS[name](ctx)
        seconds = time.perf_counter() - start
        StageRecord(
            stage=name,
            seconds=round(seconds, 1),
            finished=dt.datetime.now().isoformat(timespec="seconds"),
            host=host(),
            summary=summary,
        ).write(out / "stages" / f"{name}.json")
        log(f"[{name}] finished in {seconds / 60:.1f} min")
    return out
