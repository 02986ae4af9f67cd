"""Publishing a run's REPORT.md into the repository (e.g. docs/RESULTS.md) with its figures."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from gmlm.errors import GmlmError
from gmlm.io import atomic_write_text, make_dirs

# Text of a published report from this line on is written by hand and survives republishing.
NOTES_MARKER = "<!-- gmlm: hand-written notes below; `--publish` keeps them -->"


def publish_report(out: Path, target: Path) -> Path:
    """Copy OUT/REPORT.md to `target` (e.g. docs/RESULTS.md) with the images it shows copied
    into a folder beside it (`target`'s stem + `-figures`) and the links rewritten to them.

    When `target` already holds a line equal to NOTES_MARKER, that line and everything after
    it (hand-written diagnosis, commands run outside the pipeline) are kept, after the new
    report."""
    report = out / "REPORT.md"
    if not report.is_file():
        raise GmlmError(f"{report} does not exist yet: run the report stage first")
    figures = target.parent / f"{target.stem}-figures"
    make_dirs(figures, f"--publish {target}")

    def move(match: re.Match[str]) -> str:
        source = out / match.group(2)
        name = source.name if source.parent.name != "theory" else f"theory-{source.name}"
        shutil.copyfile(source, figures / name)
        return f"![{match.group(1)}]({figures.name}/{name})"

    text = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", move, report.read_text(encoding="utf-8"))
    old = target.read_text(encoding="utf-8") if target.is_file() else ""
    kept = old.find("\n" + NOTES_MARKER + "\n")
    if kept >= 0:
        text = text.rstrip("\n") + "\n\n" + old[kept + 1 :]
    atomic_write_text(target, text)
    return target
