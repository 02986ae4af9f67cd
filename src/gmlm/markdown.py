"""Markdown tables, written one way: a header, an alignment per column and rows of cells, each
cell as its caller formatted it (numbers keep the caller's precision)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def row(cells: Iterable[object]) -> str:
    """One table row: ``| a | b |``."""
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def table(
    header: Sequence[str], rows: Iterable[Iterable[object]] = (), align: str = ""
) -> list[str]:
    """The lines of a Markdown table: `header`, its separator (`align`: one letter per column,
    "l" left or "r" right; default all left), then `rows`."""
    align = align or "l" * len(header)
    if len(align) != len(header) or set(align) - {"l", "r"}:
        raise ValueError(f"align {align!r}: one of l or r per column of {list(header)}")
    separator = "|" + "".join("---:|" if a == "r" else "---|" for a in align)
    return [row(header), separator, *(row(r) for r in rows)]
