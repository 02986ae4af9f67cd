"""Running the `gmlm` command line in-process."""

from __future__ import annotations

from collections.abc import Sequence

from gmlm.cli.main import main


def exit_status(argv: Sequence[str]) -> int:
    """`gmlm ARGV`'s exit status: what main returns (2 for a GmlmError), or the status of the
    SystemExit argparse raises for a flag it refuses as it parses (2, a value out of range)."""
    try:
        return main(list(argv))
    except SystemExit as exit_info:
        return int(exit_info.code or 0)
