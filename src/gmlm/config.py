"""Typed configuration: dataclass schemas, YAML presets holding overrides only, `a.b=value`.

A schema is a (nested) dataclass whose fields all have defaults. A preset is a YAML file that
overrides some of those fields; presets may name a parent with a top-level `base: NAME` key.
Command-line overrides use dotted paths (`model.d_model=256`). Unknown keys are rejected with
the list of valid ones, values are checked against the field types (a float setting must be a
finite number: NaN slips through every range check, since all comparisons with it are false)
and against the range each numeric field declares (:func:`bounds`), and the resolved config is
written next to every output with :func:`save_config`.

Every numeric setting declares its range once, with the setting: a dataclass field in its
metadata (``steps: int = field(default=4, metadata=bounds(ge=1, le=1000))``), a function
parameter as a :class:`Range` constant that the function checks (those several commands
share, SEED, BATCH_SIZE, ..., below). The loader checks the fields' ranges,
:func:`check_settings` those of settings built in Python, and every numeric flag checks its
range as it is parsed (gmlm.cli.flags.number).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gmlm.errors import GmlmError
from gmlm.io import atomic_write_text

T = TypeVar("T")

PRESET_DIR = Path(__file__).parent / "configs"


class ConfigError(GmlmError, ValueError):
    """A configuration problem the user can fix (unknown key, bad value, missing preset)."""


def _show(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Range:
    """The values a numeric setting may take: ``ge <= value <= le`` and ``gt < value < lt``
    (None: no bound on that side). `note` says what the bounds mean or why they are there,
    for the error message. A float setting must also be finite, whatever its range."""

    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    lt: float | None = None
    note: str = ""

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )

    def describe(self) -> str:
        """The range in words: "between 1 and 1000", ">= 0", "in [0, 1)"."""
        low = [(b, "[", ">=") for b in (self.ge,) if b is not None]
        low += [(b, "(", ">") for b in (self.gt,) if b is not None]
        high = [(b, "]", "<=") for b in (self.le,) if b is not None]
        high += [(b, ")", "<") for b in (self.lt,) if b is not None]
        if not (low and high):
            return " and ".join(f"{sign} {_show(b)}" for b, _, sign in low + high) or "any number"
        (lo, left, _), (hi, right, _) = low[0], high[0]
        if left + right == "[]":
            return f"between {_show(lo)} and {_show(hi)}"
        return f"in {left}{_show(lo)}, {_show(hi)}{right}"

    def problem(self, value: Any) -> str:
        """What is wrong with `value` ("must be between 1 and 1000 (1 is greedy search)",
        ": expected a finite number, ..."), or "" when it lies in the range."""
        if isinstance(value, float) and not math.isfinite(value):
            return ": expected a finite number, not NaN or infinity"
        if value in self:
            return ""
        return f"must be {self.describe()}" + (f" ({self.note})" if self.note else "")

    def check(self, value: Any, name: str) -> Any:
        """`value` if it lies in the range (finite, for a float); else a ConfigError naming
        `name`, the range and its note."""
        problem = self.problem(value)
        if problem:
            space = "" if problem.startswith(":") else " "
            raise ConfigError(f"{name}={_show(value)}{space}{problem}")
        return value


RANGE = "range"  # the metadata key of a field's Range


def bounds(
    shared: Range | None = None,
    *,
    ge: float | None = None,
    le: float | None = None,
    gt: float | None = None,
    lt: float | None = None,
    note: str = "",
) -> dict[str, Range]:
    """The metadata that declares a numeric field's range: ``field(default=4,
    metadata=bounds(ge=1, le=1000))``, or ``bounds(SEED)`` for a shared :class:`Range`. For a
    list field the range holds for each item."""
    return {RANGE: shared or Range(ge=ge, le=le, gt=gt, lt=lt, note=note)}


def range_of(f: dataclasses.Field[Any]) -> Range | None:
    """The range a dataclass field declares (:func:`bounds`), if any."""
    found = f.metadata.get(RANGE)
    return found if isinstance(found, Range) else None


def check_in_range(f: dataclasses.Field[Any], value: Any, path: str) -> Any:
    """`value` of the field `f` checked against the field's range (each item of a list);
    None (an optional setting left out) passes."""
    limits = range_of(f)
    if limits is None or value is None:
        return value
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            limits.check(item, f"{path}[{i}]")
    else:
        limits.check(value, path)
    return value


# Ranges of settings that several commands share, as dataclass fields and as the parameters of
# library functions (whose flags are built without importing the library, which loads torch).
SEED = Range(ge=0, le=2**32 - 1, note="a seed is a 32-bit unsigned integer")
THREADS = Range(ge=0, le=4096, note="0: the default")
THREAD_COUNT = Range(ge=1, le=THREADS.le)
BATCH_SIZE = Range(ge=1, le=1_000_000, note="sentences per batch")
SENTENCES = Range(ge=1, le=10**9)
# Optimizer steps, and counts of steps (warm-up, logging, validation intervals; the steps
# `gmlm average` reads from a run's history): a billion steps is years of training on any
# machine.
TRAINING_STEPS = Range(ge=1, le=10**9)
# Padded tokens per batch (training's max_tokens, `gmlm data bench`): 16M tokens is far beyond
# what any accelerator takes in one batch.
MAX_TOKENS = Range(ge=1, le=1 << 24)
# The longest sequence, in tokens, any setting may name (a model's max_source_len and
# max_target_len, the data's max_len, decoding length limits): position tables and attention
# grow with it, and no corpus gmlm reads comes near it.
MAX_LENGTH = 1 << 16
LENGTH = Range(ge=1, le=MAX_LENGTH)
# Vocabulary sizes (the model's embedding rows, the tokenizer's pieces): far beyond any
# SentencePiece vocabulary used for translation.
MAX_VOCAB = 1 << 20
VOCAB_SIZE = Range(ge=1, le=MAX_VOCAB)
# What a benchmark times (steps, epochs) and runs untimed first.
TIMED = Range(ge=1, le=100_000)
WARMUP = Range(ge=0, le=100_000)
WORLD_SIZE = Range(ge=1, le=1 << 16, note="processes")


def field_range(cls: type, name: str) -> Range:
    """The range the field `name` of the dataclass `cls` declares: for a flag or a parameter
    that takes what that field takes (a list of its values, a setting passed on to it)."""
    (f,) = (f for f in dataclasses.fields(cls) if f.name == name)
    found = range_of(f)
    if found is None:
        raise TypeError(f"{cls.__name__}.{name} declares no range")
    return found


@functools.cache  # get_type_hints re-evaluates every annotation: 0.5 ms a call
def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Check `value` against the annotation `tp`, converting only where lossless (int -> float)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        present = [arg for arg in args if arg is not type(None)]
        if len(present) == 1:  # an optional setting: its one type's error says most
            return _coerce(value, present[0], path)
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, path)
            except ConfigError:
                continue
        raise ConfigError(f"{path}: {value!r} matches none of {tp}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{path}: {value!r} is not one of {list(args)}")
        return value
    if origin in (list, tuple, Sequence):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and args:
            value = [value]  # one item for a list setting: a list of one (prune_keep=2)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        item_tp = args[0] if args else Any
        items = [_coerce(v, item_tp, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping for section {tp.__name__}")
        return from_dict(tp, value, prefix=f"{path}.")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true/false, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return check_finite(float(value), path)
        if isinstance(value, str):  # YAML 1.1 reads "3e-3" (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
            else:
                return check_finite(number, path)
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}: expected a string, got {value!r}")
    raise ConfigError(f"{path}: unsupported field type {tp}")


def check_value(value: Any, tp: Any, name: str) -> Any:
    """`value` checked against the annotation `tp` like a config field's (int -> float is the
    only conversion), for settings given in Python; a ConfigError names `name`."""
    return _coerce(value, tp, name)


def check_finite(value: float, name: str) -> float:
    """`value` if it is a finite number; NaN and infinities are a ConfigError naming `name`."""
    if not math.isfinite(value):
        raise ConfigError(f"{name}={value}: expected a finite number, not NaN or infinity")
    return value


def check_settings(settings: Any, prefix: str = "") -> None:
    """Check the dataclass instance `settings` as :func:`merge` checks what it reads, for
    settings built in Python: every float finite (see :func:`check_finite`), every numeric
    field within its declared range, nested sections included (named `prefix` + path)."""
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_settings(value, f"{path}.")
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        for i, item in enumerate(items):
            if isinstance(item, float):
                check_finite(item, f"{path}[{i}]" if items is value else path)
        check_in_range(f, value, path)


def from_dict(cls: type[T], data: Mapping[str, Any], prefix: str = "") -> T:
    """Build `cls` from a (partial) mapping; unknown keys raise ConfigError naming valid ones."""
    return merge(cls(), data, prefix)


def merge(cfg: T, data: Mapping[str, Any], prefix: str = "") -> T:
    """Return a copy of dataclass `cfg` with the values in `data` (nested mappings) applied."""
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        raise TypeError("merge expects a dataclass instance")
    types_ = _field_types(type(cfg))
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    changes: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in types_:
            valid = ", ".join(sorted(f"{prefix}{k}" for k in types_))
            raise ConfigError(f"unknown config key '{path}'; valid keys here: {valid}")
        current = getattr(cfg, key)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            changes[key] = merge(current, value, prefix=f"{path}.")
        else:
            changes[key] = check_in_range(fields[key], _coerce(value, types_[key], path), path)
    return dataclasses.replace(cfg, **changes)


def parse_override(text: str) -> dict[str, Any]:
    """`a.b=value` -> {"a": {"b": value}}; the value is parsed as YAML (so 3, 1e-3, true, [1,2])."""
    if "=" not in text:
        raise ConfigError(
            f"override '{text}' is not of the form key=value (e.g. model.d_model=256)"
        )
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{text}' has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override '{text}': cannot parse value: {err}") from None
    out: dict[str, Any] = {}
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def preset_path(name: str | Path, presets: Path = PRESET_DIR) -> Path:
    """The YAML file `name` names: a path ending in .yaml or .yml, or a preset's name in the
    folder `presets` (the training presets by default)."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        return path
    candidate = presets / f"{name}.yaml"
    if not candidate.is_file():
        names = ", ".join(sorted(p.stem for p in presets.glob("*.yaml")))
        raise ConfigError(f"unknown preset '{name}'; available presets: {names}")
    return candidate


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset_dict(
    name: str | Path, _seen: tuple[str, ...] = (), presets: Path = PRESET_DIR
) -> dict[str, Any]:
    """Read a preset, following `base:` parents; later files override earlier ones. A bare
    base name is a sibling file first, then a preset of the folder `presets` (a reproduce
    preset's base is a reproduce preset, wherever the file that names it lies)."""
    path = preset_path(name, presets)
    if str(path) in _seen:
        raise ConfigError(f"preset cycle through {path}")
    data = read_yaml_mapping(
        path, "a preset is a mapping of overrides, e.g. `model: {d_model: 256}`"
    )
    base = data.pop("base", None)
    if base is None:
        return data
    sibling = path.parent / f"{base}.yaml"
    if Path(str(base)).suffix not in (".yaml", ".yml") and sibling.is_file():
        base = sibling
    parent = load_preset_dict(base, (*_seen, str(path)), presets)
    return deep_update(parent, data)


def read_yaml_mapping(path: Path, fix: str) -> dict[str, Any]:
    """The mapping in YAML file `path` (an empty file gives {}); anything else is a ConfigError
    naming the file and ending with `fix`."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)  # where the parser gave up, 0-based
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or " ".join(str(err).split())
        raise ConfigError(f"{path}{where}: invalid YAML ({problem}); {fix}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; {fix}") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: holds a {type(data).__name__}, not a mapping; {fix}")
    return data


def deep_update(base: dict[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in new.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_update(out[key], value)
        else:
            out[key] = value
    return out


def load_config(cls: type[T], preset: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Defaults of `cls`, then the preset (if any), then each `a.b=value` override in order."""
    data: dict[str, Any] = load_preset_dict(preset) if preset is not None else {}
    for text in overrides:
        data = deep_update(data, parse_override(text))
    return from_dict(cls, data)


def to_dict(cfg: Any) -> dict[str, Any]:
    result = dataclasses.asdict(cfg)
    return typing.cast(dict[str, Any], _plain(result))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def save_config(cfg: Any, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically) so every output says how it was made."""
    atomic_write_text(Path(path), yaml.safe_dump(to_dict(cfg), sort_keys=False))


def load_saved_config(cls: type[T], path: str | Path) -> T:
    """Read a config written by :func:`save_config`; every error names the file."""
    return load_saved(path, lambda data: from_dict(cls, data))


def load_saved(path: str | Path, build: Callable[[dict[str, Any]], T]) -> T:
    """`build` applied to the mapping of a file :func:`save_config` wrote (a reader of part
    of it, or of all: :func:`load_saved_config`); every error names the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    fix = "gmlm wrote this file: restore it from a copy of its folder, or recreate the folder"
    data = read_yaml_mapping(path, fix)
    try:
        return build(data)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}; {fix}") from None
