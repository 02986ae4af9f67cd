import re
from dataclasses import dataclass, field
from typing import Literal

import pytest
import yaml

from gmlm.config import (
    ConfigError,
    check_finite_fields,
    from_dict,
    load_config,
    load_saved_config,
    parse_override,
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
        ("stepz=1", "valid keys here: bf16, name, note, optim, steps"),
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


def test_check_finite_fields_names_the_field():
    check_finite_fields(Optim(lr=0.5))
    with pytest.raises(ConfigError, match=r"^lr=nan: expected a finite number"):
        check_finite_fields(Optim(lr=float("nan")))


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
