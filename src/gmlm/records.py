"""Typed JSON records: what one stage writes and another reads (sacrebleu's Score / Signature).

A record is a frozen dataclass whose fields are the keys of a JSON object, in order; `to_json`
and `from_json` are derived from the field declarations, so one declaration writes and reads a
file. Field types: bool, int, float (an int is accepted and kept, so a file round-trips
exactly), str, `Literal[...]` of strings, `X | None`, unions of types read from different
kinds of JSON value (`Info | str`: an object or a string), `tuple[X, ...]` (a JSON list),
`dict[str, X]`, nested dataclasses, and `Any`: an open-ended value kept as read (the modules
that use one say why it is open). Field metadata declares the exceptions to "key = field name":

    @dataclass(frozen=True, kw_only=True)
    class Row(Record):
        system: str
        beam: int | None = field(default=None, metadata=OMIT_NONE)  # absent for PaDIR rows
        quality: Quality = field(metadata=FLATTEN)  # its keys sit in the row itself
        bleu: str = field(metadata=json_key("bleu_signature"))  # another JSON name

Reading is strict: a missing key, a key the record does not declare, or a value of the wrong
type is a GmlmError that names the file and the key path (``systems[2].bleu``), never a
KeyError in the code that uses the value.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from gmlm.errors import GmlmError

R = TypeVar("R", bound="Record")
D = TypeVar("D")


#: Field metadata: the key is left out when the value is None, and may be absent when read.
OMIT_NONE = {"omit_none": True}
#: Field metadata: a nested record whose keys sit in this object itself.
FLATTEN = {"flatten": True}


def json_key(name: str) -> dict[str, str]:
    """Field metadata: the JSON name of a field when it is not the field's name."""
    return {"key": name}


class Record:
    """Base of the typed results: derived `to_json` / `from_json`, and `read` / `write` of a
    file. Subclasses are ``@dataclass(frozen=True, kw_only=True)``."""

    def to_json(self) -> dict[str, Any]:
        """The JSON object: keys in field order."""
        return fields_to_json(self)

    @classmethod
    def from_json(cls: type[R], data: Any, origin: str = "JSON", path: str = "") -> R:
        """The record of a parsed JSON object read from `origin` (a file name, for messages);
        `path` is where the object sits in the file ("" at the top)."""
        return fields_from_json(cls, data, origin, path)

    @classmethod
    def read(cls: type[R], path: Path) -> R:
        """The record in the JSON file `path`."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise GmlmError(f"{path} does not exist: run the step that writes it first") from None
        except (OSError, UnicodeDecodeError) as err:
            raise GmlmError(f"{path}: cannot be read ({err})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise GmlmError(
                f"{path}: not valid JSON ({err}); rerun the step that writes it"
            ) from None
        return cls.from_json(data, str(path))

    @classmethod
    def read_if_present(cls: type[R], path: Path) -> R | None:
        """The record in `path`, or None when the file does not exist (a stage not run)."""
        return cls.read(path) if Path(path).is_file() else None

    def write(self, path: Path) -> None:
        """Write the JSON (indented, atomically)."""
        from gmlm.io import atomic_write_json

        atomic_write_json(Path(path), self.to_json())


def fields_to_json(obj: Any) -> dict[str, Any]:
    """The JSON object of a dataclass instance (a Record or a plain dataclass)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.metadata.get("omit_none") and value is None:
            continue
        if f.metadata.get("flatten"):
            out.update(_encode(value))
        else:
            out[f.metadata.get("key") or f.name] = _encode(value)
    return out


def fields_from_json(cls: type[D], data: Any, origin: str, path: str = "") -> D:
    """An instance of the dataclass `cls` from the JSON object `data` (see the module
    docstring); every key of `data` must belong to a field."""
    if not isinstance(data, dict):
        raise _wrong(origin, path, data, f"a JSON object ({cls.__name__})")
    values, used = _decode_fields(cls, data, origin, path)
    unknown = [key for key in data if key not in used]
    if unknown:
        where = f"key '{path}'" if path else "the top-level object"
        raise GmlmError(
            f"{origin}: {where} has key(s) {', '.join(map(repr, unknown))} that "
            f"{cls.__name__} does not declare; the file was written by another version of gmlm "
            "or edited by hand: rerun the step that writes it"
        )
    return cls(**values)


def _decode_fields(
    cls: type, data: dict[str, Any], origin: str, path: str
) -> tuple[dict[str, Any], set[str]]:
    hints = _hints(cls)
    values: dict[str, Any] = {}
    used: set[str] = set()
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if f.metadata.get("flatten"):
            inner, inner_used = _decode_fields(hint, data, origin, path)
            values[f.name] = hint(**inner)
            used |= inner_used
            continue
        key = f.metadata.get("key") or f.name
        if key not in data:
            if f.metadata.get("omit_none"):
                values[f.name] = None
                continue
            raise GmlmError(
                f"{origin}: key '{_join(path, key)}' is missing; the file was written by another "
                "version of gmlm or edited by hand: rerun the step that writes it"
            )
        values[f.name] = decode(hint, data[key], origin, _join(path, key))
        used.add(key)
    return values, used


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode(hint: Any, value: Any, origin: str, path: str) -> Any:
    """`value` read as the type `hint`, or a GmlmError naming `origin` and `path`."""
    if hint is Any:
        return value
    kind = typing.get_origin(hint)
    args = typing.get_args(hint)
    if kind in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        if len(others) == 1:
            if value is None:
                raise _wrong(origin, path, value, _describe(others[0]))
            return decode(others[0], value, origin, path)
        kinds = [_json_kind(a) for a in others]
        if None in kinds or len(set(kinds)) != len(kinds):
            raise TypeError(
                f"unsupported record field type {hint}: members must differ in JSON kind"
            )
        for member, member_kind in zip(others, kinds, strict=True):
            if member_kind == _value_kind(value):
                return decode(member, value, origin, path)
        raise _wrong(origin, path, value, " or ".join(_describe(a) for a in others))
    if kind is Literal:
        if value not in args:
            raise _wrong(origin, path, value, " or ".join(map(repr, args)))
        return value
    if kind is tuple:
        if not isinstance(value, list):
            raise _wrong(origin, path, value, "a list")
        return tuple(decode(args[0], v, origin, f"{path}[{i}]") for i, v in enumerate(value))
    if kind is dict:
        if not isinstance(value, dict):
            raise _wrong(origin, path, value, "a JSON object")
        return {k: decode(args[1], v, origin, _join(path, k)) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if issubclass(hint, Record):
            return hint.from_json(value, origin, path)
        return fields_from_json(hint, value, origin, path)
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint in (str, bool):
        if isinstance(value, hint):
            return value
    else:
        raise TypeError(f"unsupported record field type {hint}")
    raise _wrong(origin, path, value, _describe(hint))


def _json_kind(hint: Any) -> str | None:
    """The kind of JSON value a union member is read from ("object", "list", "string",
    "number", "bool"); None for a member a union cannot tell apart (Any, a nested union)."""
    kind = typing.get_origin(hint)
    if kind is dict or (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
        return "object"
    if kind is tuple:
        return "list"
    if kind is Literal or hint is str:
        return "string"
    return {int: "number", float: "number", bool: "bool"}.get(hint)


def _value_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "list"
    return "string" if isinstance(value, str) else "other"


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_to_json(value)
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(hint: Any) -> str:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return f"a JSON object ({hint.__name__})"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _wrong(origin: str, path: str, value: Any, expected: str) -> GmlmError:
    shown = json.dumps(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    where = f"key '{path}'" if path else "the top level"
    return GmlmError(
        f"{origin}: {where} holds {shown}, expected {expected}; the file was written by another "
        "version of gmlm or edited by hand: rerun the step that writes it"
    )
