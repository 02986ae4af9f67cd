"""How a settings dataclass documents itself and spells itself on a command line.

Every setting of a command is a dataclass field whose metadata (:func:`doc`) carries its help,
its flag, whether the command line offers it and its range; `gmlm.cli.options` derives the
flags from those fields, and :func:`to_argv` renders settings back as the flags that give them
(the commands section of REPORT.md). Torch-free and below every package (docs/ARCHITECTURE.md's
package order), so that any package may declare its settings with it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from gmlm.config import RANGE, Range


def doc(
    help: str, *, flag: str | None = None, cli: bool = True, range: Range | None = None
) -> dict[str, Any]:
    """The metadata that documents a setting, as the command line shows it:
    ``name: int = field(default=4, metadata=doc("what it does", range=Range(ge=1)))``.

    help: what the setting does (the command line appends the default).
    flag: the command-line spelling where it is not ``--field-name``; a bool field is a switch
        that sets the opposite of its default, spelled ``flag`` (default: ``--no-NAME`` for a
        True default, ``--NAME`` for a False one).
    cli: False for a setting only Python callers can use (what it changes is not the text
        output, or it exists for measurements); `help` then says why.
    range: the values a number (each item of a list of numbers) may take, checked wherever
        the setting is read (:mod:`gmlm.config`), the command line included.
    """
    return {"help": help, "flag": flag, "cli": cli, RANGE: range}


def documented_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of the options dataclass `cls`, each checked to carry its documentation."""
    found = []
    for f in dataclasses.fields(cls):
        if not isinstance(f.metadata.get("help"), str) or "cli" not in f.metadata:
            raise TypeError(
                f"{cls.__name__}.{f.name} has no help: declare it with "
                "field(default=..., metadata=doc('what it does')) (gmlm.settings)"
            )
        found.append(f)
    return found


def cli_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The documented fields of `cls` that the command line offers (metadata cli=True)."""
    return [f for f in documented_fields(cls) if f.metadata["cli"]]


def flag_of(f: dataclasses.Field[Any]) -> str:
    """The field's command-line spelling."""
    flag = f.metadata.get("flag")
    if flag:
        return str(flag)
    if f.default is True:
        return f"--no-{f.name.replace('_', '-')}"
    return f"--{f.name.replace('_', '-')}"


def to_argv(settings: Any) -> list[str]:
    """The flags that give `settings` (a settings dataclass whose command-line fields are
    derived by :func:`add_option_flags`) on the command line: one per field whose value is not
    its default, in field order; parsing them gives `settings` back. A value that starts with
    '-' is joined to its flag (``--length-offsets=-1,1``), which argparse would take for a
    flag."""
    changed = {}
    for f in cli_fields(type(settings)):
        value = getattr(settings, f.name)
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if not (value == default or (isinstance(value, list) and tuple(value) == default)):
            changed[f.name] = value
    return flags_of(type(settings), changed)


def flags_of(cls: type, values: Mapping[str, Any]) -> list[str]:
    """The flags that give the fields of `cls` the `values` (field name -> value), whatever
    their defaults: a switch by its flag, a list of strings by its flag once per item, any
    other value joined to its flag where it starts with '-'."""
    fields = {f.name: f for f in cli_fields(cls)}
    hints = typing.get_type_hints(cls)
    argv = []
    for name, value in values.items():
        f, tp = fields[name], hints[name]
        flag = flag_of(f)
        if isinstance(value, bool):
            argv += [flag] if value != f.default else []
        elif typing.get_origin(tp) in (tuple, list) and typing.get_args(tp)[:1] == (str,):
            argv += [word for item in value for word in (flag, item)]
        else:
            text = _spelled(value)
            argv += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return argv


def _spelled(value: Any) -> str:
    """`value` as its flag reads it back: comma-separated items, a float in its shortest
    form that reads back equal (0.5, 1, 1e-05)."""
    if isinstance(value, (list, tuple)):
        return ",".join(_spelled(v) for v in value)
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)
