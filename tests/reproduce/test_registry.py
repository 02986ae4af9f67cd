"""A stage of `gmlm reproduce` is one declaration (gmlm.reproduce.config.STAGE_REGISTRY), and
every part of the run reads it: the config, the pipeline, the report and the timing table."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from gmlm.config import range_of, to_dict
from gmlm.reproduce import sections, stages
from gmlm.reproduce.config import (
    ESTIMATION,
    HITTING,
    STAGE,
    STAGE_REGISTRY,
    STAGES,
    TRAINING_STAGES,
    VERIFY,
    ReproduceConfig,
    StageSeconds,
    TheoryStage,
    TrainStage,
    parse_stages,
    trained_stage,
)
from gmlm.reproduce.pipeline import READ_DATA, stage_function
from gmlm.reproduce.report import TRAINED_RUNS

# ReproduceConfig's keys around its stages' (the YAML shape of every reproduce.yaml).
BEFORE = ["preset", "description", "published", "threads", "train_precision"]
AFTER = ["checkpoint", "targets", "expected_seconds"]


def test_the_config_has_a_key_per_stage_with_settings_in_the_registrys_order() -> None:
    names = [f.name for f in dataclasses.fields(ReproduceConfig)]
    with_settings = [stage.name for stage in STAGE_REGISTRY if stage.settings is not None]
    assert names == [*BEFORE, *with_settings, *AFTER]
    hints = typing.get_type_hints(ReproduceConfig)
    cfg = ReproduceConfig()
    for stage in STAGE_REGISTRY:
        if stage.settings is not None:
            assert hints[stage.name] is stage.settings, stage.name
            assert type(getattr(cfg, stage.name)) is stage.settings, stage.name
    assert list(to_dict(cfg)) == names


@pytest.mark.parametrize("stage", STAGE_REGISTRY, ids=lambda stage: stage.name)
def test_a_stage_declared_once_is_everywhere(stage: typing.Any) -> None:
    name = stage.name
    earlier = STAGES[: STAGES.index(name)]
    assert STAGE[name] is stage and stage.what and set(stage.needs) <= set(earlier)
    # the pipeline: its function, its place in --stages, its expected seconds
    assert stage_function(name) is getattr(stages, name) and callable(stage_function(name))
    assert parse_stages(name) == [name]
    assert getattr(StageSeconds(**{name: 12.5}), name) == 12.5
    # the report: its row in the time table, a training stage's system among the trained runs
    assert f"| {name} | " in "\n".join(sections.stage_section({}))
    trains = stage.settings is not None and issubclass(stage.settings, TrainStage)
    assert (name in TRAINING_STAGES) == trains == bool(stage.system)
    assert ((name, stage.system) in TRAINED_RUNS) == trains
    assert (name in READ_DATA) == stage.reads_data


def test_the_timing_table_has_a_float_per_stage_in_order() -> None:
    fields = dataclasses.fields(StageSeconds)
    assert [f.name for f in fields] == list(STAGES)
    assert all(f.type is float and f.default == 0.0 and range_of(f) for f in fields)
    assert StageSeconds.__module__ == "gmlm.reproduce.config" and StageSeconds.__doc__


def test_only_a_training_stage_has_trained_settings() -> None:
    cfg = ReproduceConfig()
    assert [trained_stage(cfg, name) for name in TRAINING_STAGES] == [
        cfg.teacher,
        cfg.ar,
        cfg.ar1,
        cfg.padir,
    ]
    with pytest.raises(KeyError):
        trained_stage(cfg, "distill")


def test_the_theory_stage_takes_its_settings_from_the_theory_commands() -> None:
    passed_on = {
        "verify_max_n": (VERIFY, "max_n"),
        "repetitions": (ESTIMATION, "repetitions"),
        "sample_sizes": (ESTIMATION, "sample_sizes"),
        "figure3_couplings": (HITTING, "couplings"),
        "figure3_ks": (HITTING, "ks"),
        "figure3_budget": (HITTING, "budget"),
        "seed": (VERIFY, "seed"),
    }
    stage = TheoryStage()
    for f in dataclasses.fields(TheoryStage):
        if f.name == "enabled":
            continue
        settings, name = passed_on[f.name]
        (theirs,) = (g for g in dataclasses.fields(settings) if g.name == name)
        default = getattr(settings, name)
        assert getattr(stage, f.name) == (list(default) if isinstance(default, tuple) else default)
        assert range_of(f) is range_of(theirs), f.name
    assert stage.verify() == VERIFY and stage.hitting() == HITTING
