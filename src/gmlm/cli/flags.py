"""Flags and value parsers that several commands share, each spelled and parsed once.

One vocabulary: ``--checkpoint`` a checkpoint or run folder, ``--out`` an output folder,
``--output`` an output file, ``--precision`` the arithmetic (one of
:data:`gmlm.decoding.options.PRECISIONS`), ``--json`` a machine-readable result on stdout.
Old spellings stay one release as hidden aliases that print a one-line deprecation warning
(:func:`add_alias`). A number is read by :func:`number`, which checks the range declared with
the setting (:class:`gmlm.config.Range`) as it parses, so that a value out of range is an
error naming the flag before any work starts.

Imports neither torch nor the models: `gmlm --help` builds every parser.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from gmlm.config import BATCH_SIZE, MAX_TOKENS, SEED, Range
from gmlm.decoding.options import PRECISIONS

T = TypeVar("T")
N = TypeVar("N", int, float)


class number(Generic[N]):  # lower-case, like the int and float it stands for
    """An argparse `type` reading an int or a (finite) float within `limits`: ``type=number(int,
    Range(ge=1))``; a value out of range is an error naming the flag and the range."""

    def __init__(self, item: Callable[[str], N], limits: Range) -> None:
        self.item: Callable[[str], N] = item
        self.range = limits
        self.__name__ = "integer" if item is int else "number"  # argparse's "invalid ... value"

    def __call__(self, text: str) -> N:
        value = self.item(text)  # a ValueError: argparse says "invalid integer value: 'x'"
        problem = self.range.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{text}{'' if problem[0] == ':' else ' '}{problem}")
        return value


def comma_list(
    item: Callable[[str], T], what: str, example: str, *, allow_empty: bool = False
) -> Callable[[str], tuple[T, ...]]:
    """An argparse `type` that reads comma-separated values of `item` (int, float, ...);
    `what` names them and `example` shows a valid list in the error message. Empty items are
    skipped; an empty list is an error unless `allow_empty`. An item read by :class:`number`
    is checked against its range (the error names the item)."""

    def parse(text: str) -> tuple[T, ...]:
        try:
            values = tuple(item(x) for x in text.split(",") if x.strip())
        except ValueError:
            values = None
        if values is None or not (values or allow_empty):
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected comma-separated {what}, e.g. {example}"
            )
        return values

    parse.__name__ = f"{what} list"
    parse.item = item  # type: ignore[attr-defined]
    return parse


def choice_list(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse `type` reading comma-separated values, each one of `choices`."""

    def parse(text: str) -> tuple[str, ...]:
        values = tuple(x.strip() for x in text.split(",") if x.strip())
        if not values or any(v not in choices for v in values):
            raise argparse.ArgumentTypeError(
                f"{text!r}: choose from {', '.join(choices)}, comma-separated (e.g. "
                f"{','.join(choices)})"
            )
        return values

    parse.__name__ = "choice list"
    return parse


def show(value: Any) -> str:
    """A default as the command line spells it: 0.6, 1,8,64, none."""
    if value is None or value == ():
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(show(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


class DeprecatedAlias(argparse.Action):
    """A hidden old spelling of a flag: stores into the new flag's destination (`const` for
    a switch, else the value given) and prints a one-line deprecation warning."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.replacement: str = kwargs.pop("replacement")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        replacement = self.replacement.format(value=values)
        print(
            f"gmlm: warning: {option_string} is deprecated and will be removed; use {replacement}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def add_alias(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    old: str,
    dest: str,
    replacement: str,
    *,
    const: Any = None,
    **kwargs: Any,
) -> None:
    """Keep `old` working, hidden from --help, as another spelling of the flag whose
    destination is `dest`: a switch storing `const` when `const` is given, else a flag with
    a value (`kwargs`: type, choices). `replacement` (may use {value}) is what to write
    instead, shown in the warning."""
    if const is not None:
        kwargs["nargs"] = 0
    parser.add_argument(
        old,
        action=DeprecatedAlias,
        dest=dest,
        const=const,
        default=argparse.SUPPRESS,  # the new flag's default stands
        help=argparse.SUPPRESS,
        replacement=replacement,
        **kwargs,
    )


def add_checkpoint(parser: argparse.ArgumentParser, help: str, **kwargs: Any) -> None:
    parser.add_argument("--checkpoint", type=Path, required=True, help=help, **kwargs)


def add_device(parser: argparse.ArgumentParser, default: str = "auto") -> None:
    others = ", ".join(d for d in ("auto", "cpu", "cuda") if d != default)
    parser.add_argument(
        "--device", default=default, help=f"{default} (default), {others} or cuda:N"
    )


def add_cuda_graphs(
    parser: argparse.ArgumentParser, help: str, default: bool | None = False
) -> None:
    """--cuda-graphs; with `default` None also --no-cuda-graphs, unset meaning automatic."""
    parser.add_argument(
        "--cuda-graphs",
        action="store_true" if default is False else argparse.BooleanOptionalAction,
        default=default,
        help="replay the encoder and each decoder pass or step as CUDA graphs (needs --device "
        f"cuda; one graph per shape, captured the first time it is met) {help}",
    )


def add_precision(
    parser: argparse.ArgumentParser,
    help: str,
    *,
    default: str | None = "fp32",
    old_switch: str | None = "--bf16",
    choices: Sequence[str] = PRECISIONS,
) -> None:
    """--precision with `choices` (default: every decoding precision, PRECISIONS);
    `old_switch` (--bf16) stays a hidden deprecated alias."""
    shown = f" (default: {default})" if default is not None else ""
    parser.add_argument("--precision", choices=choices, default=default, help=help + shown)
    if old_switch is not None:
        value = old_switch.removeprefix("--")
        add_alias(parser, old_switch, "precision", f"--precision {value}", const=value)


def add_seed(parser: argparse.ArgumentParser, help: str, default: int = 0) -> None:
    parser.add_argument(
        "--seed", type=number(int, SEED), default=default, help=f"{help} (default: {default})"
    )


def add_batching(parser: argparse.ArgumentParser, default_tokens: int, why: str) -> None:
    """--max-tokens and --batch-size of a translation (both None unless given): what bounds
    each decoder batch (gmlm.translation.translator, "Batches"); neither given means
    --max-tokens `default_tokens`, for the reason `why`."""
    parser.add_argument(
        "--max-tokens",
        type=number(int, MAX_TOKENS),
        default=None,
        help="padded decoder row-positions per batch at most: its rows (PaDIR: every "
        "sentence's candidates; AR: its beams) times its widest row (PaDIR: the longest "
        "candidate length predicted; AR: the source length), similar widths batched together "
        f"(default, unless --batch-size alone is given: {default_tokens}; {why})",
    )
    parser.add_argument(
        "--batch-size",
        type=number(int, BATCH_SIZE),
        default=None,
        help="sentences per batch at most; alone, batches by sentence count (sorted by "
        "source length) instead of by tokens",
    )


def add_json(parser: argparse.ArgumentParser, help: str = "print one JSON object") -> None:
    parser.add_argument("--json", action="store_true", help=help)


# What an output file may replace (gmlm.io.check_output_file; docs/DESIGN.md section 6),
# for the help of every flag that names one.
OUTPUT_FILE_RULE = (
    "written atomically (its folder created if missing), gzip-compressed if the name ends in "
    ".gz; an existing file is "
    "replaced, as a shell redirect would, but never an input of the command nor a file inside "
    "a checkpoint or training run folder"
)


def add_output(
    parser: argparse.ArgumentParser, help: str, old: str | None = None, **kwargs: Any
) -> None:
    """--output FILE, its help followed by OUTPUT_FILE_RULE; `old` (a former spelling) stays a
    hidden deprecated alias."""
    parser.add_argument("--output", type=Path, help=f"{help}; {OUTPUT_FILE_RULE}", **kwargs)
    if old is not None:
        add_alias(parser, old, "output", "--output {value}", type=Path)


def add_no_progress(parser: argparse.ArgumentParser, help: str = "no progress bar") -> None:
    parser.add_argument("--no-progress", action="store_true", help=help)
