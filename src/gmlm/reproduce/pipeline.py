"""`gmlm reproduce`: run the stages in order, skipping those already complete.

The run folder holds `reproduce.yaml` (the resolved config) and `stages/NAME.json`, written
when a stage finishes (its summary and wall-clock seconds). A rerun with the same config skips
finished stages and resumes an interrupted one; a folder holding a different config is
refused, naming the keys that differ, so two presets never mix their outputs. One exception,
for long runs spread over days: with the same preset, the settings of a stage that has not
started yet (neither finished nor written its folder) may change, e.g. PaDIR's recipe while
the teacher trains, or the `ar1` stage switched on in a run begun before it existed, unless a
stage that reads its output has finished (the evaluation would then lack its rows); the saved
config then records the new settings. And a training stage that has started may change its
`max_steps`, to stop earlier or train longer, when its learning-rate schedule does not depend
on max_steps (inverse_sqrt, constant): the steps already taken are then exactly those of a run
planned with the new length. The settings of a stage that is off (`enabled: false`) in both
configs do not count.

The run folder is locked while the stages run (:mod:`gmlm.locking`): a second `gmlm reproduce`
on it fails at once instead of resuming the stage the first one is running.

A run whose data stage prepared gmlm's example sentences because the Multi30k test files were
missing (`data.examples_if_missing`) is provisional: once the files are there (at the
configured folder, or at another one given as `data.corpus`), rerunning the same command
prepares the test set and redoes the stages that read it.

A stage run again (`--redo`, or a checkpoint given to it that changed on disk) takes with it
every finished stage that read its output, directly or not, and the report: no result stays
computed from an output that is gone. Those outside --stages lose their records, so that the
next run without --stages runs them.

Each stage starts with a line saying what it does and, where the preset states measured stage
times (`expected_seconds`), about how long the run has left, scaled by how fast the stages of
this invocation have gone so far against those times.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gmlm.config import ConfigError, save_config, to_dict
from gmlm.errors import GmlmError
from gmlm.io import REPRODUCE_FILE
from gmlm.locking import LOCK_FILE, folder_lock
from gmlm.provenance import host
from gmlm.reproduce import stages
from gmlm.reproduce.config import (
    STAGE,
    STAGE_REGISTRY,
    STAGES,
    TRAINING_STAGES,
    ReproduceConfig,
    read_reproduce_file,
    trained_stage,
)
from gmlm.reproduce.data_inputs import check_data_inputs
from gmlm.reproduce.stage_record import StageRecord
from gmlm.reproduce.stand_in import stand_in_reason

# Settings that may change between a run and its resumption: they do not change the recipe.
# threads and train_precision belong to the machine (train_precision changes rounding, as a
# change of CPU does); the others change what the report says, not what a stage computes.
RESUMABLE_KEYS = (
    "threads",
    "train_precision",
    "description",
    "published",
    "targets",
    "expected_seconds",
)
# The stages that read the data stage's output, redone when a stand-in run gets its test set.
READ_DATA = tuple(stage.name for stage in STAGE_REGISTRY if stage.reads_data)


def stage_function(name: str) -> Callable[[stages.Context], dict[str, Any]]:
    """The function of stage `name` (its declaration: gmlm.reproduce.config.Stage)."""
    function: Callable[[stages.Context], dict[str, Any]] = getattr(stages, name)
    return function


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    return [prefix.rstrip(".")] if a != b else []


def check_run_folder(cfg: ReproduceConfig, out: Path) -> None:
    """Refuse a folder that holds another preset's (or another config's) run."""
    saved_path = out / REPRODUCE_FILE
    if not saved_path.is_file():
        if out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir()):
            raise GmlmError(
                f"--out {out} exists, is not empty and holds no {REPRODUCE_FILE}: it is not a "
                "reproduction run; choose an empty or new folder"
            )
        return
    # Through the schema, so that settings added since (with their defaults) do not count.
    try:
        saved = to_dict(read_reproduce_file(saved_path))
    except ConfigError as err:
        raise GmlmError(
            f"--out {out}: its {REPRODUCE_FILE} does not fit this version of gmlm ({err}); use "
            "another --out"
        ) from None
    new = to_dict(cfg)
    diff = [key for key in _differences(saved, new) if key.split(".")[0] not in RESUMABLE_KEYS]
    diff = [key for key in diff if not _off_in_both(saved, new, key.split(".")[0])]
    if saved.get("preset") == cfg.preset:
        # The same preset, revised: settings of stages that have not started yet may change.
        diff = [key for key in diff if not _may_change(out, key.split(".")[0])]
        diff = [key for key in diff if not _only_budget(saved, new, key)]
        if stand_in_reason(out):  # its data stage is redone once the corpus is there
            diff = [key for key in diff if key != "data.corpus"]
    if diff:
        was = saved.get("preset", "?")
        other = f" (this is '{cfg.preset}')" if was != cfg.preset else ""
        raise GmlmError(
            f"--out {out} holds a run of preset '{was}'{other} with different settings "
            f"({', '.join(diff[:8])}{', ...' if len(diff) > 8 else ''}); use another --out, "
            f"or rerun with the same preset and overrides to resume it"
            + (_read_already_hint(out, diff) if was == cfg.preset else "")
        )


def _off_in_both(saved: dict[str, Any], new: dict[str, Any], section: str) -> bool:
    """Whether `section` is a stage switched off (`enabled: false`) in both configs: its other
    settings then change nothing (an off `ar1` keeps its preset's recipe, e.g.)."""
    return all(
        isinstance(cfg.get(section), dict) and cfg[section].get("enabled") is False
        for cfg in (saved, new)
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


def _readers_done(out: Path, section: str) -> list[str]:
    """The finished stages that read stage `section`'s output. Empty for a stage that has not
    started, except in a run of an older gmlm that finished them before the stage existed
    (`ar1`): switching that stage on then would leave it out of their results."""
    return [name for name in STAGES if section in STAGE[name].needs and stage_done(out, name)]


def _may_change(out: Path, section: str) -> bool:
    """Whether the settings of stage `section` may change: it has not started, and no finished
    stage has read its output."""
    return _not_started(out, section) and not _readers_done(out, section)


def _read_already_hint(out: Path, diff: Sequence[str]) -> str:
    """How to revise the settings of a stage in `diff` that has not started but that finished
    stages read, or ""."""
    for section in dict.fromkeys(key.split(".")[0] for key in diff):
        readers = _readers_done(out, section) if _not_started(out, section) else []
        if readers:
            redo = [*readers, *(["report"] if stage_done(out, "report") else [])]
            records = ", ".join(str(out / "stages" / f"{name}.json") for name in redo)
            return (
                f". Stage {section} has not run, but {', '.join(readers)} finished without it: "
                f"to run it and redo {', '.join(redo)}, remove {records} and rerun"
            )
    return ""


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

    Finished stages are skipped unless named in `redo` (stages of `only`), which redoes also
    the finished stages that read them. A stage whose inputs are missing is an error naming the
    stage to run first.
    """
    outside = [name for name in redo if name not in only]
    if outside:
        raise GmlmError(
            f"--redo {','.join(outside)}: not among the stages to run (--stages "
            f"{','.join(only)}); add {'it' if len(outside) == 1 else 'them'} to --stages"
        )
    out = Path(out)
    with folder_lock(out, f"--out {out}"):
        _run_stages(cfg, out, only, redo, progress, log)
    return out


def _run_stages(
    cfg: ReproduceConfig,
    out: Path,
    only: Sequence[str],
    redo: Sequence[str],
    progress: bool,
    log: Callable[[str], None],
) -> None:
    """`run_reproduce` in the run folder `out`, locked by this process (gmlm.locking; the
    training, distillation and data stages lock their own folders inside it as well)."""
    import torch

    check_run_folder(cfg, out)
    save_config(cfg, out / REPRODUCE_FILE)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    ctx = stages.Context(cfg, out, progress, log)
    stand_in_outdated = stage_done(out, "data") and _stand_in_outdated(cfg, out)
    # Before any record is removed: this check may stop the run.
    data_changed = not stand_in_outdated and check_data_inputs(cfg, out, log)
    changed = _changed_given(cfg, out)
    if changed:
        why = f"[{', '.join(changed)}] a given checkpoint changed since this run used it"
        changed = _with_readers(out, changed, only, why, log, say_alone=True)
    if redo:
        why = f"[{', '.join(redo)}] run again by --redo, with the stages that read it"
        redo = _with_readers(out, redo, only, why, log, say_alone=False)
    redo = list(dict.fromkeys([*redo, *changed]))
    if stand_in_outdated and "data" in only:
        log(
            f"[data] the test set is there now ({cfg.data.corpus}): preparing it and redoing "
            f"{', '.join(READ_DATA[1:])} in place of the example sentences"
        )
        redo += READ_DATA
        _forget(out, READ_DATA)
    if data_changed and "data" not in redo:
        why = "[data] its corpus or tokenizer changed since it ran (no model trained on it)"
        redo += _with_readers(out, ["data"], only, why, log, say_alone=True)
    todo = [n for n in STAGES if n in only and (n in redo or not stage_done(out, n))]
    check_before_start(cfg, todo)
    clock = _Clock(cfg, todo)
    for name in STAGES:
        if name not in only:
            continue
        if stage_done(out, name) and name not in redo:
            log(
                f"[{name}] done already (remove {out / 'stages' / (name + '.json')} or pass "
                f"--redo {name} to run it again)"
            )
            continue
        missing = [n for n in STAGE[name].needs if not stage_done(out, n)]
        if missing:
            raise GmlmError(
                f"stage '{name}' needs stage(s) {', '.join(missing)} first: run "
                f"`gmlm reproduce --preset {cfg.preset} --out {out} --stages "
                f"{','.join(missing)}` (or without --stages to run everything)"
            )
        log(
            f"[{name}] started {dt.datetime.now():%Y-%m-%d %H:%M:%S}, stage "
            f"{todo.index(name) + 1} of {len(todo)}: {STAGE[name].what}{clock.left(name)}"
        )
        start = time.perf_counter()
        summary = stage_function(name)(ctx)
        seconds = time.perf_counter() - start
        clock.done(name, seconds)
        StageRecord(
            stage=name,
            seconds=round(seconds, 1),
            finished=dt.datetime.now().isoformat(timespec="seconds"),
            host=host(),
            summary=summary,
        ).write(out / "stages" / f"{name}.json")
        log(f"[{name}] finished in {seconds / 60:.1f} min")


def _changed_given(cfg: ReproduceConfig, out: Path) -> list[str]:
    """The finished stages that were given a checkpoint (`ar.checkpoint=DIR`, as the demo's
    released models; `compare.against`) that is not the one the stage recorded: a repository
    update replaced the released models, or a retrained model was shipped. A record without
    the digests (from a gmlm before them) counts as changed."""
    from gmlm.checkpoint.fingerprint import checkpoint_fingerprint
    from gmlm.checkpoint.loading import resolve_checkpoint

    def digest(path: str) -> str:
        return checkpoint_fingerprint(resolve_checkpoint(path))

    changed = []
    for name in TRAINING_STAGES:
        given = trained_stage(cfg, name).checkpoint
        record = StageRecord.read_if_present(out / "stages" / f"{name}.json")
        if not given or record is None or not Path(given).exists():
            continue  # nothing given, not run yet, or the stage itself reports the missing folder
        if record.fingerprint != digest(given):
            changed.append(name)
    record = StageRecord.read_if_present(out / "stages" / "compare.json")
    if record is not None and cfg.compare.enabled and "skipped" not in record.summary:
        recorded = record.fingerprints
        present = [path for path in cfg.compare.against if Path(path).exists()]
        if any(recorded.get(path) != digest(path) for path in present):
            changed.append("compare")
    return changed


def _with_readers(
    out: Path,
    names: Sequence[str],
    only: Sequence[str],
    why: str,
    log: Callable[[str], None],
    *,
    say_alone: bool,
) -> list[str]:
    """The stages of `only` to run again for `names`: those, every finished stage that read
    one of them (directly or not) and a finished report, so that no result is left from the
    output they replace. Their records are removed now (:func:`_forget`): a run stopped
    before it redoes them all leaves them to be run, not taken for done, and those outside
    `only` run at the next run without --stages. (The evaluation translates the changed models
    again by itself: gmlm.reproduce.hypotheses.) `why` starts the line that says so, written
    also when no other stage is redone if `say_alone`."""
    redo = list(names)
    for name in STAGES:  # pipeline order: a stage's inputs come before it
        if name not in redo and stage_done(out, name) and set(STAGE[name].needs) & set(redo):
            redo.append(name)
    if stage_done(out, "report") and "report" not in redo:
        redo.append("report")
    later = [name for name in redo if name not in only and stage_done(out, name)]
    now = [name for name in redo if name in only]
    _forget(out, redo)
    if say_alone or redo != list(names):
        log(
            f"{why}: redoing {', '.join(now)}"
            + (f"; {', '.join(later)} will run again without --stages" if later else "")
        )
    return now


def _forget(out: Path, names: Sequence[str]) -> None:
    """Remove the records of the finished stages among `names`, so that they count as not
    run until they run again."""
    for name in names:
        (out / "stages" / f"{name}.json").unlink(missing_ok=True)


def check_before_start(cfg: ReproduceConfig, todo: Sequence[str]) -> None:
    """Fail before the first stage, not hours later, on what a stage still to run would fail
    on: an optional package that is not installed, an ablation variant that is no decoding
    setting."""
    if "ablation" in todo and cfg.ablation.enabled:
        from gmlm.decoding.options import parse_variant

        if not cfg.ablation.variants:
            raise GmlmError(
                "ablation.variants is empty: give the decoding settings to compare with the "
                "default (e.g. [selection=sum]), or set ablation.enabled=false"
            )
        for variant in cfg.ablation.variants:
            try:
                parse_variant(variant)
            except GmlmError as err:
                raise GmlmError(f"ablation.variants: {err}") from None
    if "compare" in todo and cfg.compare.enabled:
        if not cfg.compare.against:
            raise GmlmError(
                "compare.against is empty: give the checkpoints this run's PaDIR would replace "
                "(e.g. [checkpoints/multi30k-en-de/padir]), or set compare.enabled=false"
            )
        missing = [path for path in cfg.compare.against if not Path(path).exists()]
        if missing:
            raise GmlmError(
                f"compare.against: {', '.join(missing)}: no such folder (a relative path is "
                f"read from the current folder, {Path.cwd()})"
            )
    if "train_ablation" in todo and cfg.train_ablation.enabled:
        _check_train_ablation(cfg)
    _check_training_stages(cfg, todo)
    if "bench" in todo and cfg.bench.enabled and cfg.bench.ctranslate2:
        from gmlm.export.ctranslate2 import import_ctranslate2

        try:
            import_ctranslate2()
        except GmlmError as err:
            raise GmlmError(
                f"bench.ctranslate2=true: {err}, or set bench.ctranslate2=false"
            ) from None


def _check_training_stages(cfg: ReproduceConfig, todo: Sequence[str]) -> None:
    """Each training stage still to run names a `gmlm train` preset and overrides that make a
    valid config (an unknown preset or key fails now, not after the stages before it)."""
    from gmlm.config import ConfigError
    from gmlm.training.config import load_train_config

    for name in TRAINING_STAGES:
        stage = getattr(cfg, name)
        if name not in todo or stage.checkpoint or not getattr(stage, "enabled", True):
            continue
        if name == "teacher" and not cfg.distill.enabled:  # no teacher is trained
            continue
        try:
            load_train_config(stage.preset, stage.overrides).validate()
        except (ConfigError, GmlmError) as err:
            raise GmlmError(f"the {name} stage ({name}.preset={stage.preset}): {err}") from None
    if "tune" in todo and cfg.tune.enabled:
        _check_tune(cfg)


def _check_tune(cfg: ReproduceConfig) -> None:
    """tune.overrides make a valid `gmlm train` config on top of the padir stage's (its preset
    and overrides, or the config of the checkpoint given to it)."""
    from gmlm.checkpoint.files import CONFIG_FILE
    from gmlm.config import ConfigError
    from gmlm.training.config import load_train_config

    given = Path(cfg.padir.checkpoint) if cfg.padir.checkpoint else None
    if given is not None and not (given / CONFIG_FILE).is_file():
        return  # the padir stage names the missing or odd folder itself
    preset, overrides = (
        (str(given / CONFIG_FILE), []) if given else (cfg.padir.preset, cfg.padir.overrides)
    )
    try:
        load_train_config(preset, [*overrides, *cfg.tune.overrides]).validate()
    except (ConfigError, GmlmError) as err:
        raise GmlmError(
            f"the tune stage (tune.overrides on the padir stage's config): {err}"
        ) from None


def _check_train_ablation(cfg: ReproduceConfig) -> None:
    """Each training ablation variant is a valid `gmlm train` config on top of the padir
    stage's (an unknown key or a bad value fails now, not after the padir training)."""
    from gmlm.config import ConfigError
    from gmlm.reproduce.train_ablation import variant_overrides
    from gmlm.training.config import load_train_config

    t = cfg.train_ablation
    if not t.variants:
        raise GmlmError(
            "train_ablation.variants is empty: give the training settings to switch off "
            "(e.g. [model.relative_bias=false]), or set train_ablation.enabled=false"
        )
    for variant in t.variants:
        overrides = variant_overrides(variant)
        try:
            load_train_config(
                cfg.padir.preset, [*cfg.padir.overrides, *overrides, f"max_steps={t.steps}"]
            ).validate()
        except (ConfigError, GmlmError) as err:
            raise GmlmError(f"train_ablation.variants: {variant!r}: {err}") from None


def _stand_in_outdated(cfg: ReproduceConfig, out: Path) -> bool:
    """Whether the data stage prepared the example sentences and the corpus is there now."""
    from gmlm.data.corpora import multi30k_test_missing, parse_spec

    if not stand_in_reason(out) or parse_spec(cfg.data.corpus).kind != "multi30k":
        return False
    return multi30k_test_missing(cfg.data.corpus) is None


class _Clock:
    """Time left: the preset's measured seconds of the stages still to run, scaled by the
    ratio of actual to measured time of the stages run so far in this invocation."""

    def __init__(self, cfg: ReproduceConfig, todo: Sequence[str]) -> None:
        self.expected = {name: float(getattr(cfg.expected_seconds, name)) for name in todo}
        self.actual: dict[str, float] = {}

    def done(self, name: str, seconds: float) -> None:
        self.actual[name] = seconds

    def left(self, name: str) -> str:
        """`, about N min left` before stage `name` starts, or "" without measured times."""
        remaining = [n for n in self.expected if n not in self.actual]
        if sum(self.expected.values()) <= 0:
            return ""
        measured = [n for n in self.actual if self.expected.get(n, 0) > 0]
        pace = 1.0
        if measured and sum(self.expected[n] for n in measured) > 0:
            pace = sum(self.actual[n] for n in measured) / sum(self.expected[n] for n in measured)
        seconds = pace * sum(self.expected[n] for n in remaining)
        text = f"{seconds / 60:.1f} min" if seconds >= 90 else f"{max(seconds, 1):.0f} s"
        return f"; about {text} left in all"
