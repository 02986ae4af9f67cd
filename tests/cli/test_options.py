"""Flags derived from the settings classes: every command's numbers come from one, and a
settings object's command line (`to_argv`) parses back to the same object."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest

from gmlm.analysis import settings as analysis
from gmlm.bench.settings import BenchSettings
from gmlm.cli.flags import number
from gmlm.cli.main import build_parser
from gmlm.cli.options import add_option_flags, settings_from_args
from gmlm.config import range_of
from gmlm.data.settings import DataBenchSettings, PrepareSettings
from gmlm.decoding.options import RefinementOptions, SearchOptions
from gmlm.reproduce.config import BenchStage
from gmlm.serve.loadtest import LoadSettings
from gmlm.serve.settings import ServeSettings
from gmlm.settings import cli_fields, documented_fields, to_argv
from gmlm.theory import settings as theory
from gmlm.training.average_settings import AverageSettings
from gmlm.training.throughput_settings import ThroughputSettings
from gmlm.translation.distill_settings import DistillSettings
from gmlm.translation.rescore_settings import RescoreSettings
from gmlm.translation.shard_settings import ShardSettings

# Every settings class a command derives its flags from.
SETTINGS: tuple[type, ...] = (
    SearchOptions,
    RefinementOptions,
    BenchSettings,
    analysis.AnalysisSettings,
    analysis.LengthSettings,
    analysis.AblationSettings,
    analysis.ComparisonSettings,
    analysis.CalibrationSettings,
    analysis.Table1Settings,
    ServeSettings,
    LoadSettings,
    ThroughputSettings,
    theory.VerifySettings,
    theory.EstimationSettings,
    theory.HittingSettings,
    theory.PoincareSettings,
    theory.BenchSettings,
    DistillSettings,
    ShardSettings,
    RescoreSettings,
    PrepareSettings,
    DataBenchSettings,
    AverageSettings,
)

# Numeric flags shared by several commands, spelled once in gmlm.cli.flags (add_seed,
# add_batching): each takes the command's default.
SHARED_NUMERIC = {"--seed", "--batch-size", "--max-tokens"}

# Numeric flags still written by hand, by command: to be derived from a settings class as the
# commands above are. The list is exact, so that a new hand-written flag fails this test and a
# converted one is taken off.
HAND_WRITTEN = {
    "analyze calibrate": {"--values"},
}


def leaf_parsers(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> dict[str, argparse.ArgumentParser]:
    """Each command's own parser by its words ("theory verify"), subcommands walked."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(leaf_parsers(sub, f"{prefix} {name}".strip()))
    return found or {prefix: parser}


def is_numeric(action: argparse.Action) -> bool:
    """Whether `action` reads a number or numbers (by gmlm.cli.flags.number, or by hand)."""
    kind = action.type
    if kind in (int, float) or getattr(kind, "__name__", "") == "number_list":
        return True
    return isinstance(kind, number) or isinstance(getattr(kind, "item", None), number)


def derived(action: argparse.Action) -> bool:
    """Whether `action` is the flag of a documented field of a settings class (its help is
    the field's)."""
    return any(
        f.name == action.dest and (action.help or "").startswith(f.metadata["help"])
        for cls in SETTINGS
        for f in cli_fields(cls)
    )


def test_every_numeric_flag_comes_from_a_settings_class() -> None:
    hand_written: dict[str, set[str]] = {}
    for command, parser in leaf_parsers(build_parser()).items():
        for action in parser._actions:
            if not is_numeric(action) or derived(action):
                continue
            (flag,) = [s for s in action.option_strings if s.startswith("--")] or [action.dest]
            if flag not in SHARED_NUMERIC:
                hand_written.setdefault(command, set()).add(flag)
    assert hand_written == HAND_WRITTEN


def test_the_converted_commands_take_their_settings_from_the_class() -> None:
    """bench, serve and theory: every flag of a settings field is there, with its help."""
    parsers = leaf_parsers(build_parser())
    for command, classes in {
        "bench": (BenchSettings, RefinementOptions),
        "serve": (ServeSettings,),
        "analyze attention": (analysis.AnalysisSettings, RefinementOptions),
        "analyze length": (analysis.LengthSettings,),
        "analyze ablation": (analysis.AblationSettings, RefinementOptions),
        "analyze calibrate": (analysis.CalibrationSettings,),
        "analyze table1": (analysis.Table1Settings,),
        "loadtest": (LoadSettings,),
        "throughput": (ThroughputSettings,),
        "theory verify": (theory.VerifySettings,),
        "theory figure1": (theory.EstimationSettings,),
        "theory figure2": (theory.EstimationSettings,),
        "theory figure3": (theory.HittingSettings,),
        "theory poincare": (theory.PoincareSettings,),
        "theory bench": (theory.BenchSettings,),
        "distill": (DistillSettings,),
        "data prepare": (PrepareSettings,),
        "data bench": (PrepareSettings, DataBenchSettings),
        "average": (AverageSettings,),
    }.items():
        dests = {a.dest for a in parsers[command]._actions}
        wanted = {f.name for cls in classes for f in cli_fields(cls)}
        # Set another way: bench sweeps T and B (--steps, --length-beams); the attention
        # analysis looks at the raw hypotheses, before the final filters.
        wanted -= {
            "bench": {"steps", "length_beam"},
            "analyze attention": {"dedup", "dedup_words", "keep_initial_tokens"},
        }.get(command, set())
        assert wanted <= dests, command


def other_value(cls: type, f: dataclasses.Field[Any]) -> Any:
    """A value of the field `f` of `cls` that is not its default, within its range."""
    tp = typing.get_type_hints(cls)[f.name]
    if typing.get_origin(tp) in (typing.Union, type(int | None)):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return not default
    if tp is str:
        return "other"
    if tp is Path:
        return Path("some/where")
    if origin is typing.Literal:
        return next(a for a in args if a != default)
    limits = range_of(f)
    if origin is tuple:
        item = args[0]
        if typing.get_origin(item) is typing.Literal:
            choices = typing.get_args(item)
            return (choices[-1], choices[0])
        ends = [b for b in (limits.ge, limits.le) if b is not None] if limits else []
        values = tuple(item(b) for b in ends) or (item(3),)  # negative first where allowed
        return values if values != tuple(default) else values[:1]
    if default is None:  # an optional number: any value in its range
        return tp(limits.ge if limits and limits.ge is not None else 1)
    for candidate in (default + 1, default - 1, default * 0.5, default + 0.25, 1, 1e-5):
        value = tp(candidate) if tp is int else candidate
        if value != default and (limits is None or value in limits):
            return value
    raise AssertionError(f"{cls.__name__}.{f.name}: no other value")


@pytest.mark.parametrize("cls", SETTINGS, ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_to_argv_round_trips(cls: type) -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_option_flags(parser, {"settings": cls})
    assert to_argv(cls()) == []
    assert settings_from_args(cls, parser.parse_args([])) == cls()
    for f in cli_fields(cls):
        settings = cls(**{f.name: other_value(cls, f)})
        argv = to_argv(settings)
        assert len(argv) in (1, 2), argv
        assert settings_from_args(cls, parser.parse_args(argv)) == settings, argv
    changed = cls(**{f.name: other_value(cls, f) for f in cli_fields(cls)})
    assert settings_from_args(cls, parser.parse_args(to_argv(changed))) == changed


def test_to_argv_spells_values_as_their_flags_read_them() -> None:
    options = RefinementOptions(length_offsets=(-1, 1), length_score_weight=0.1 + 0.2, steps=10)
    spelled = [
        "--steps",
        "10",
        "--length-offsets=-1,1",
        "--length-score-weight",
        "0.30000000000000004",
    ]
    assert to_argv(options) == spelled
    assert to_argv(BenchSettings(precisions=("int8",), padir_steps=(4,), ctranslate2=True)) == [
        "--precision",
        "int8",
        "--steps",
        "4",
        "--ctranslate2",
    ]


def test_a_reproduce_stage_renders_the_command_line_of_its_settings() -> None:
    """The bench stage is the bench's settings plus its switch: `to_argv` leaves the switch
    out, and the real `gmlm bench` parser reads the stage's settings back."""
    assert [f.name for f in documented_fields(BenchStage) if not f.metadata["cli"]] == ["enabled"]
    stage = BenchStage(sentences=8, warmup=10, precisions=("fp32", "bf16"), split="valid")
    argv = to_argv(stage)
    assert argv == [
        "--split",
        "valid",
        "--sentences",
        "8",
        "--warmup",
        "10",
        "--precision",
        "fp32,bf16",
    ]
    args = build_parser().parse_args(["bench", "--ar", "a", "--padir", "p", "--data", "d", *argv])
    assert settings_from_args(BenchSettings, args) == BenchSettings(
        **{f.name: getattr(stage, f.name) for f in dataclasses.fields(BenchSettings)}
    )


def test_a_repeated_flag_is_named_by_its_flag_and_an_empty_default_reads_none() -> None:
    parser = argparse.ArgumentParser()
    add_option_flags(parser, {"settings": analysis.Table1Settings})
    (action,) = [a for a in parser._actions if a.dest == "directions"]
    assert action.option_strings == ["--direction"] and action.metavar == "DIRECTION"
    assert (action.help or "").endswith("(default: none)")
