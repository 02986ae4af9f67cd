"""Command-line flags derived from the settings dataclasses of the commands.

Every field of a command's settings (the decoding options
:class:`~gmlm.decoding.options.SearchOptions` and :class:`~gmlm.decoding.options.RefinementOptions`,
:class:`~gmlm.bench.settings.BenchSettings`, :class:`~gmlm.serve.settings.ServeSettings`, ...)
documents itself (``metadata=doc(...)``, :mod:`gmlm.settings`); this module turns the fields
into argparse flags:
``--field-name`` (or the field's own ``flag``), the type from the annotation (int, float,
Literal choices, tuple[int, ...] as a comma-separated list, a tuple of Literal values as
comma-separated choices, a Path, bool as a switch that sets the opposite of the default), a
number checked against the field's declared range as it is parsed, and the help with the real
default read from the dataclass. A field without that metadata is an error when
the parser is built, so no setting can be added without reaching the command line (or saying,
with ``cli=False``, why it does not).

Every derived flag defaults to None (not given): :func:`option_overrides` collects the given
ones as ``name=value`` overrides, and the options classes keep the defaults
(:func:`settings_from_args` builds a command's settings object from them).
:func:`gmlm.settings.to_argv` is the way back: the flags that reproduce a settings object,
only those whose value is not the default (the report's command lines,
:mod:`gmlm.reproduce.sections`).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from gmlm.cli.flags import choice_list, comma_list, number, show
from gmlm.config import Range, range_of
from gmlm.settings import cli_fields, documented_fields, flag_of

T = TypeVar("T")


def argument_kwargs(cls: type, f: dataclasses.Field[Any]) -> dict[str, Any]:
    """argparse keyword arguments of the field `f` of `cls`, from its annotation."""
    tp = typing.get_type_hints(cls)[f.name]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        present = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(present) == 1:
            tp = present[0]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return {"action": "store_const", "const": not f.default}
    if origin is typing.Literal:
        return {"choices": args}
    if tp is str:
        return {"type": str}
    if tp is Path:
        return {"type": Path}
    if origin in (tuple, list) and args and args[0] is str:  # a flag given once per item
        return {"action": "append", "type": str}
    if origin in (tuple, list) and args and typing.get_origin(args[0]) is typing.Literal:
        return {"type": choice_list(typing.get_args(args[0]))}
    limits = range_of(f)
    if limits is None and (tp in (int, float) or origin in (tuple, list)):
        raise TypeError(
            f"{cls.__name__}.{f.name} declares no range: give it one with "
            "metadata=bounds(...) (gmlm.config)"
        )
    if tp in (int, float):
        return {"type": number(tp, limits or Range())}
    if origin in (tuple, list) and args and args[0] in (int, float):
        what = "integers" if args[0] is int else "numbers"
        item = number(args[0], limits or Range())
        empty = f.default == ()
        example = "-1,1" if empty else show(f.default)
        return {"type": comma_list(item, what, example, allow_empty=empty)}
    raise TypeError(f"{cls.__name__}.{f.name}: no command-line form for a field of type {tp}")


def add_option_flags(
    parser: argparse.ArgumentParser,
    classes: Mapping[str, type],
    *,
    exclude: Iterable[str] = (),
    defaults: Mapping[str, Any] | None = None,
) -> None:
    """Add a flag for every command-line field of the options classes, keyed by who they
    serve (e.g. {"autoregressive checkpoints": SearchOptions, "PaDIR checkpoints":
    RefinementOptions}): a field of one class goes to an argument group of that title (of
    the parser itself when there is one class), a field several classes share to the parser,
    with each class's default. Fields named in `exclude` are left out (a command that sets
    them another way). `defaults` (field name -> value) are the command's own defaults where
    they are not the class's (Figure 2's coupling): the help shows them, and
    :func:`settings_from_args` must be given the same."""
    skip = set(exclude)
    owners: dict[str, list[str]] = {}
    for title, cls in classes.items():
        for f in cli_fields(cls):
            owners.setdefault(f.name, []).append(title)
    for title, cls in classes.items():
        group: Any = parser if len(classes) == 1 else parser.add_argument_group(title)
        for f in cli_fields(cls):
            shared = len(owners[f.name]) > 1
            if f.name in skip or (shared and owners[f.name][0] != title):
                continue
            owned = [(t, classes[t]) for t in owners[f.name]]
            _add_flag(
                parser if shared else group, f, owned, (defaults or {}).get(f.name, f.default)
            )


def _add_flag(
    target: Any, f: dataclasses.Field[Any], owners: list[tuple[str, type]], default: Any
) -> None:
    """One field's flag; `owners` are the (title, class) pairs that have the field, whose
    help texts must agree (one declaration)."""
    fields = {title: {g.name: g for g in documented_fields(cls)}[f.name] for title, cls in owners}
    helps = {g.metadata["help"] for g in fields.values()}
    if len(helps) > 1:
        names = ", ".join(cls.__name__ for _, cls in owners)
        raise TypeError(f"{f.name}: {names} document it differently; share one help text")
    kwargs = argument_kwargs(owners[0][1], f)
    text = str(f.metadata["help"])
    if kwargs.get("action") == "append":
        text += f" (default: {'; '.join(default) or 'none'})"
    elif kwargs.get("action") != "store_const":  # a switch's help says what it changes
        if len(fields) == 1:
            text += f" (default: {show(default)})"
        else:
            defaults = ", ".join(f"{show(g.default)} for {t}" for t, g in fields.items())
            text += f" (default: {defaults})"
    if f.metadata.get("flag") and "choices" not in kwargs and kwargs.get("action") != "store_const":
        kwargs["metavar"] = flag_of(f).removeprefix("--").replace("-", "_").upper()
    target.add_argument(flag_of(f), dest=f.name, default=None, help=text, **kwargs)


def option_overrides(args: argparse.Namespace, classes: Iterable[type]) -> dict[str, Any]:
    """The derived flags given on the command line, as field name -> value (the items of a
    repeated flag as a tuple)."""
    names = {f.name for cls in classes for f in cli_fields(cls)}
    given = {name: getattr(args, name, None) for name in sorted(names)}
    return {
        name: tuple(value) if isinstance(value, list) else value
        for name, value in given.items()
        if value is not None
    }


def settings_from_args(
    cls: type[T], args: argparse.Namespace, defaults: Mapping[str, Any] | None = None
) -> T:
    """The settings object of `cls` that the command line asked for: its defaults (and the
    command's own `defaults`, as given to :func:`add_option_flags`), and the derived flags
    given."""
    return cls(**{**(defaults or {}), **option_overrides(args, [cls])})
