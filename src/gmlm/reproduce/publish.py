"""Publishing a run's REPORT.md into the repository (e.g. docs/results/multi30k-de-en.md)
with its figures."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from gmlm.errors import GmlmError
from gmlm.io import atomic_open, atomic_write_text, check_output_file, make_dirs

# The first line of every REPORT.md starts so (gmlm.reproduce.report.header): what marks a
# file as a report gmlm published, the only kind of existing file `--publish` replaces.
TITLE = "# gmlm reproduction: preset "
# Text of a published report from this line on is written by hand and survives republishing.
NOTES_MARKER = "<!-- gmlm: hand-written notes below; `--publish` keeps them -->"


def is_published_report(path: Path) -> bool:
    """Whether the file `path` is a report gmlm published: UTF-8 text whose first line is a
    REPORT.md's title."""
    try:
        return path.read_text(encoding="utf-8").startswith(TITLE)
    except (OSError, UnicodeDecodeError):
        return False


def figures_folder(target: Path) -> Path:
    """Where the figures of a report published at `target` go: beside it, `target`'s stem +
    `-figures`."""
    return target.parent / f"{target.stem}-figures"


def check_publish_target(out: Path, target: Path) -> None:
    """Refuse, before any work, a `--publish` path that publishing would wrongly write over:
    a folder, an existing file that is not a report gmlm published (a non-UTF-8 file, a
    user's text), a path inside the run folder `out` or inside a checkpoint or training run
    (gmlm.io.check_output_file), or a new one whose figures folder already holds files."""
    check_output_file(
        target,
        "--publish",
        inputs={"--out": out},
        own=is_published_report,
        what=f"a report gmlm published (a file whose first line starts with '{TITLE.strip()}')",
    )
    figures = figures_folder(target)
    if figures.exists() and not figures.is_dir():
        raise GmlmError(
            f"--publish {target}: its figures go in {figures}, which is a file; choose another path"
        )
    if figures.is_dir() and any(figures.iterdir()) and not target.exists():
        raise GmlmError(
            f"--publish {target}: its figures go in {figures}, which holds files of something "
            "else (there is no earlier report at that path); choose another path"
        )


def publish_report(out: Path, target: Path) -> Path:
    """Copy OUT/REPORT.md to `target` (e.g. docs/results/multi30k-de-en.md) with the images it
    shows copied into a folder beside it (`figures_folder`) and the links rewritten to them.
    `target` is new or a report published before (`check_publish_target`).

    When `target` already holds a line equal to NOTES_MARKER, that line and everything after
    it (hand-written diagnosis, commands run outside the pipeline) are kept, after the new
    report."""
    report = out / "REPORT.md"
    if not report.is_file():
        raise GmlmError(f"{report} does not exist yet: run the report stage first")
    check_publish_target(out, target)
    figures = make_dirs(figures_folder(target), f"--publish {target}")

    def move(match: re.Match[str]) -> str:
        source = out / match.group(2)
        name = source.name if source.parent.name != "theory" else f"theory-{source.name}"
        with open(source, "rb") as image, atomic_open(figures / name, "wb") as copy:
            shutil.copyfileobj(image, copy)
        return f"![{match.group(1)}]({figures.name}/{name})"

    text = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", move, report.read_text(encoding="utf-8"))
    old = target.read_text(encoding="utf-8") if target.is_file() else ""
    kept = old.find("\n" + NOTES_MARKER + "\n")
    if kept >= 0:
        text = text.rstrip("\n") + "\n\n" + old[kept + 1 :]
    atomic_write_text(target, text)
    return target
