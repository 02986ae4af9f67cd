"""`gmlm reproduce --publish FILE`: a new file or a report published before, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from gmlm.cli.main import main
from gmlm.errors import GmlmError
from gmlm.reproduce.publish import NOTES_MARKER, publish_report

REPORT = "# gmlm reproduction: preset `smoke`\n\n![BLEU](figures/bleu.png)\n"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run folder holding a REPORT.md with one figure."""
    out = tmp_path / "runs" / "smoke"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "bleu.png").write_bytes(b"\x89PNG fake")
    (out / "REPORT.md").write_text(REPORT, encoding="utf-8")
    return out


def test_publish_writes_a_new_file_and_replaces_its_own_keeping_the_notes(
    run: Path, tmp_path: Path
) -> None:
    target = tmp_path / "docs" / "RESULTS.md"
    published = REPORT.replace("figures/bleu.png", "RESULTS-figures/bleu.png")
    assert publish_report(run, target).read_text(encoding="utf-8") == published
    assert (tmp_path / "docs" / "RESULTS-figures" / "bleu.png").read_bytes() == b"\x89PNG fake"
    notes = f"{NOTES_MARKER}\n\nwritten by hand\n"
    target.write_text(published + "\n" + notes, encoding="utf-8")
    assert publish_report(run, target).read_text(encoding="utf-8") == published + "\n" + notes


def test_publish_refuses_what_gmlm_did_not_publish(run: Path, tmp_path: Path) -> None:
    mine = tmp_path / "input.de"
    mine.write_text("der Hund läuft.\n", encoding="utf-8")
    latin1 = tmp_path / "notes.md"
    latin1.write_bytes("Fu\xdfball\n".encode("latin-1"))
    taken = tmp_path / "new.md"
    (tmp_path / "new-figures").mkdir()
    (tmp_path / "new-figures" / "photo.png").write_bytes(b"mine")
    refused = {
        mine: r"exists and is not a report gmlm published \(a file whose first line starts "
        r"with '# gmlm reproduction: preset'\); refusing to overwrite it",
        latin1: "exists and is not a report gmlm published",
        tmp_path: "is a folder; give a file path",
        taken: "its figures go in .*new-figures, which holds files of something else",
        run / "RESULTS.md": "lies inside --out",
    }
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    for target, message in refused.items():
        with pytest.raises(GmlmError, match=message):
            publish_report(run, target)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "input-figures").exists() and not (tmp_path / "notes-figures").exists()


def test_cli_refuses_the_publish_path_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run_reproduce(*args: object, **kwargs: object) -> None:
        raise AssertionError("the pipeline ran before --publish was checked")

    monkeypatch.setattr("gmlm.cli.reproduce.run_reproduce", run_reproduce)
    mine = tmp_path / "input.de"
    mine.write_text("der Hund läuft.\n", encoding="utf-8")
    out = tmp_path / "run"
    assert main(["reproduce", "--preset", "smoke", "--out", str(out), "--publish", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gmlm: error: --publish {mine} exists and is not a report gmlm")
    assert err.count("\n") == 1
    assert mine.read_text(encoding="utf-8") == "der Hund läuft.\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["input.de"]
