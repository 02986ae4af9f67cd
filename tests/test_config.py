import dataclasses
import importlib
import re
import typing
from dataclasses import dataclass, field
from typing import Literal

import pytest
import yaml

from gmlm.config import (
    ConfigError,
    Range,
    bounds,
    check_settings,
    from_dict,
    load_config,
    load_saved_config,
    parse_override,
    range_of,
    save_config,
)


@dataclass
class Optim:
    lr: float = 1e-3
    kind: Literal["adamw", "adafactor"] = "adamw"
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])


@dataclass
class Cfg:
    name: str = "x"
    steps: int = 10
    beams: int = field(default=1, metadata=bounds(ge=1, le=8, note="1 is greedy"))
    sizes: list[int] = field(default_factory=lambda: [1, 2], metadata=bounds(ge=1))
    rate: float | None = field(default=None, metadata=bounds(ge=0, lt=1))
    bf16: bool = False
    note: str | None = None
    optim: Optim = field(default_factory=Optim)


def test_overrides_nested_and_typed():
    cfg = load_config(Cfg, None, ["optim.lr=3e-3", "steps=5", "bf16=true", "optim.kind=adafactor"])
    assert cfg.optim.lr == 3e-3 and cfg.steps == 5 and cfg.bf16 is True
    assert cfg.optim.kind == "adafactor" and cfg.optim.betas == [0.9, 0.98]
    assert load_config(Cfg, None, ["optim.lr=1"]).optim.lr == 1.0  # int widened to float


@pytest.mark.parametrize(
    "override, match",
    [
        ("optim.lrr=1", "unknown config key 'optim.lrr'; valid keys here: optim.betas"),
        ("stepz=1", "valid keys here: beams, bf16, name, note, optim, rate, sizes, steps"),
        ("steps=1.5", "steps: expected an integer"),
        ("bf16=maybe", "bf16: expected true/false"),
        ("optim.kind=sgd", "not one of"),
        ("steps", "key=value"),
        ("optim=3", "expected a mapping|unsupported"),
    ],
)
def test_bad_overrides_are_clear(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(Cfg, None, [override])


def test_presets_with_base_and_cycle(tmp_path):
    (tmp_path / "base.yaml").write_text("steps: 7\noptim:\n  lr: 0.5\n")
    child = tmp_path / "child.yaml"
    child.write_text(f"base: {tmp_path / 'base.yaml'}\noptim:\n  kind: adafactor\n")
    cfg = load_config(Cfg, child, ["steps=8"])
    assert (cfg.steps, cfg.optim.lr, cfg.optim.kind) == (8, 0.5, "adafactor")
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"base: {loop}\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(Cfg, loop)
    with pytest.raises(ConfigError, match="unknown preset 'nope'"):
        load_config(Cfg, "nope")
    # A bare base name is a sibling file first (reproduce presets build on reproduce presets).
    (tmp_path / "sibling.yaml").write_text("steps: 3\n")
    named = tmp_path / "named.yaml"
    named.write_text("base: sibling\noptim:\n  lr: 0.25\n")
    assert (load_config(Cfg, named).steps, load_config(Cfg, named).optim.lr) == (3, 0.25)


def test_save_and_reload_round_trip(tmp_path):
    cfg = from_dict(Cfg, {"name": "run", "optim": {"lr": 0.1}})
    save_config(cfg, tmp_path / "config.yaml")
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["optim"]["lr"] == 0.1
    assert load_saved_config(Cfg, tmp_path / "config.yaml") == cfg


def test_parse_override_values():
    assert parse_override("a.b=[1, 2]") == {"a": {"b": [1, 2]}}
    assert parse_override("a=") == {"a": ""}
    assert parse_override("note=null") == {"note": None}


@pytest.mark.parametrize("value", ["nan", ".nan", "inf", "-.inf", "1e999", "-Infinity"])
def test_every_float_setting_must_be_finite(value, tmp_path):
    # NaN passes every range check (all comparisons with it are false), so it must stop here.
    with pytest.raises(ConfigError, match=r"optim\.lr=.*expected a finite number"):
        load_config(Cfg, None, [f"optim.lr={value}"])
    preset = tmp_path / "p.yaml"
    preset.write_text(f"optim: {{lr: {value}}}\n")
    with pytest.raises(ConfigError, match=r"optim\.lr=.*expected a finite number"):
        load_config(Cfg, preset)
    with pytest.raises(ConfigError, match=r"optim\.betas\[1\]=.*finite"):
        load_config(Cfg, None, [f"optim.betas=[0.9, {value}]"])


def test_check_settings_names_the_field():
    check_settings(Optim(lr=0.5))
    with pytest.raises(ConfigError, match=r"^lr=nan: expected a finite number"):
        check_settings(Optim(lr=float("nan")))
    with pytest.raises(ConfigError, match=r"^betas\[1\]=inf: expected a finite number"):
        check_settings(Optim(betas=[0.9, float("inf")]))
    # Ranges, nested sections included, for settings built in Python.
    check_settings(Cfg())
    with pytest.raises(ConfigError, match=r"^beams=9 must be between 1 and 8 \(1 is greedy\)$"):
        check_settings(Cfg(beams=9))
    with pytest.raises(ConfigError, match=r"^sizes\[1\]=0 must be >= 1$"):
        check_settings(Cfg(sizes=[3, 0]))
    with pytest.raises(ConfigError, match=r"^optim\.lr=nan"):
        check_settings(Cfg(optim=Optim(lr=float("nan"))))


@pytest.mark.parametrize(
    "override, match",
    [
        ("beams=0", r"^beams=0 must be between 1 and 8 \(1 is greedy\)$"),
        ("beams=100000", r"^beams=100000 must be between 1 and 8"),
        ("sizes=[1, -5]", r"^sizes\[1\]=-5 must be >= 1$"),
        ("sizes=0", r"^sizes\[0\]=0 must be >= 1$"),
        ("rate=1", r"^rate=1 must be in \[0, 1\)$"),
        ("rate=nan", r"^rate=nan: expected a finite number"),
    ],
)
def test_the_loader_checks_every_declared_range(override, match, tmp_path):
    with pytest.raises(ConfigError, match=match):
        load_config(Cfg, None, [override])
    preset = tmp_path / "p.yaml"
    preset.write_text(override.replace("=", ": ", 1) + "\n")
    with pytest.raises(ConfigError, match=match):
        load_config(Cfg, preset)
    assert load_config(Cfg, None, ["beams=8", "sizes=[4]", "rate=null"]).beams == 8


@pytest.mark.parametrize(
    "limits, text",
    [
        (Range(ge=1, le=1000), "between 1 and 1000"),
        (Range(ge=1), ">= 1"),
        (Range(gt=0), "> 0"),
        (Range(le=3), "<= 3"),
        (Range(ge=0, lt=1), "in [0, 1)"),
        (Range(gt=0, le=1e-4), "in (0, 0.0001]"),
        (Range(), "any number"),
    ],
)
def test_a_range_in_words(limits, text):
    assert limits.describe() == text


def test_a_range_holds_numbers_only():
    assert 5 in Range(ge=1) and 0 not in Range(ge=1) and 1.0 in Range(gt=0.5, le=1)
    assert True not in Range(ge=0) and "3" not in Range() and float("nan") not in Range(ge=0)


@pytest.mark.parametrize(
    "text, match",
    [
        ("steps: [1\n", r":2: invalid YAML \(expected ',' or '\]', but got '<stream end>'\); gmlm"),
        ("- a\n- b\n", r": holds a list, not a mapping; gmlm wrote this file"),
        ("stepz: 3\n", r": unknown config key 'stepz'.*; gmlm wrote this file"),
    ],
)
def test_damaged_saved_config_names_the_file(tmp_path, text, match):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}{match}"):
        load_saved_config(Cfg, path)
    path.write_bytes(b"name: \xff\n")
    with pytest.raises(ConfigError, match=r"config\.yaml: not UTF-8 text"):
        load_saved_config(Cfg, path)


def test_one_number_for_a_list_setting_is_a_list_of_one():
    assert from_dict(Optim, {"betas": 0.5}).betas == [0.5]
    assert from_dict(Optim, {"betas": 1}).betas == [1.0]  # widened like any float
    with pytest.raises(ConfigError, match="betas"):
        from_dict(Optim, {"betas": "0.5"})  # a string is not a number
    with pytest.raises(ConfigError, match="betas"):
        from_dict(Optim, {"betas": True})


def settings_schemas() -> dict[str, type]:
    """Every settings dataclass of gmlm: the configs (training, data, reproduce), the decoding
    options and the theory settings, with the sections nested in them, by dotted name."""
    from gmlm.data.prepare import DataConfig
    from gmlm.decoding.options import RefinementOptions, SearchOptions
    from gmlm.reproduce.config import ReproduceConfig
    from gmlm.serve.settings import ServeSettings
    from gmlm.theory import settings as theory
    from gmlm.training.config import TrainConfig

    roots = [TrainConfig, DataConfig, ReproduceConfig, SearchOptions, RefinementOptions]
    roots += [theory.VerifySettings, theory.EstimationSettings, theory.HittingSettings]
    roots += [theory.PoincareSettings, theory.BenchSettings, ServeSettings]
    found: dict[str, type] = {}

    def walk(cls: type) -> None:
        found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name])

    for root in roots:
        walk(root)
    return found


def numbers_in(tp: object) -> bool:
    """Whether a field of annotation `tp` holds numbers (one, an optional one or a list)."""
    if tp in (int, float):
        return True
    return any(numbers_in(arg) for arg in typing.get_args(tp) if arg is not Ellipsis)


def test_every_numeric_setting_declares_its_range():
    schemas = settings_schemas()
    assert len(schemas) > 20
    missing = [
        f"{name}.{f.name}"
        for name, cls in schemas.items()
        for f in dataclasses.fields(cls)
        if numbers_in(typing.get_type_hints(cls)[f.name]) and range_of(f) is None
    ]
    assert missing == []


def test_the_walk_sees_every_settings_class():
    """A settings dataclass added to a settings module is walked by the test above."""
    walked = set(settings_schemas())
    modules = ["gmlm.config", "gmlm.nn.config", "gmlm.training.config", "gmlm.data.prepare"]
    modules += ["gmlm.reproduce.config", "gmlm.decoding.options", "gmlm.theory.settings"]
    modules += ["gmlm.serve.settings"]
    defined = {
        f"{module}.{name}"
        for module in modules
        for name, value in vars(importlib.import_module(module)).items()
        if isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__module__ == module
        and value is not Range
    }
    assert defined - walked == set()


def test_every_default_and_preset_lies_in_its_range():
    from gmlm.config import list_presets
    from gmlm.reproduce.config import list_reproduce_presets, load_reproduce_config
    from gmlm.training.config import load_train_config

    for cls in settings_schemas().values():
        check_settings(cls())
    for name in list_presets():
        load_train_config(name, [])
    for name in list_reproduce_presets():
        check_settings(load_reproduce_config(name))
