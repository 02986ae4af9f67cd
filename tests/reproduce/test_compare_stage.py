"""The compare stage of `gmlm reproduce`: the run's PaDIR against the checkpoints it would
replace, on the validation split, in the report with a command gmlm takes."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from gmlm.analysis.results import ComparisonResult
from gmlm.checkpoint.fingerprint import checkpoint_fingerprint
from gmlm.checkpoint.loading import resolve_checkpoint
from gmlm.errors import GmlmError
from gmlm.reproduce.config import checkpoint_dir, load_reproduce_config
from gmlm.reproduce.pipeline import run_reproduce
from gmlm.reproduce.stage_record import StageRecord
from tests.helpers.reproduce_runs import quick

TRAINED = ("data", "teacher", "distill", "ar", "ar1", "padir", "tune", "calibrate")


def test_the_runs_padir_is_compared_with_a_given_checkpoint(corpus: str, tmp_path: Path) -> None:
    from gmlm.cli.main import build_parser

    out = tmp_path / "run"
    base = quick(corpus, "theory.enabled=false")
    run_reproduce(load_reproduce_config("smoke", base), out, TRAINED, progress=False, log=print)
    # A stage not started yet may be set between resumptions: here, against a copy of the
    # run's own PaDIR (the same translations: not tested against itself).
    padir = checkpoint_dir(load_reproduce_config("smoke", base), out, "padir")
    shipped = tmp_path / "shipped"
    shutil.copytree(resolve_checkpoint(padir), shipped)
    on = ["compare.enabled=true", f"compare.against=[{shipped}]", "compare.sentences=10"]
    cfg = load_reproduce_config("smoke", [*base, *on])
    run_reproduce(cfg, out, ("compare", "report"), progress=False, log=print)
    result = ComparisonResult.read(out / "compare" / "compare.json")
    assert [row.checkpoint for row in result.rows] == [str(shipped), str(padir)]
    assert result.split == "valid" and result.sentences == 10
    assert result.rows[1].same_output and result.rows[1].p_value is None
    summary = StageRecord.read(out / "stages" / "compare.json").summary
    assert summary == {"bleu": result.rows[1].quality.bleu, "against": result.rows[0].quality.bleu,
                       "p_value": None, "fingerprints": {str(shipped): checkpoint_fingerprint(
                           shipped)}}  # fmt: skip
    report = (out / "REPORT.md").read_text(encoding="utf-8")
    assert "## Against the current model (validation)" in report
    (command,) = [line for line in report.splitlines() if line.startswith("gmlm analyze compare")]
    args = build_parser().parse_args(shlex.split(command)[1:])
    assert (args.checkpoint, args.against, args.sentences) == (shipped, [str(padir)], 10)

    # Compared again (and reported again) only once a checkpoint it was given changes on disk:
    # a retrained model shipped in its place, here other decoding defaults. The record then
    # holds the new digest: it compared the checkpoint as it is now.
    messages: list[str] = []
    run_reproduce(cfg, out, ("compare", "report"), progress=False, log=messages.append)
    assert "[compare] done already" in messages[0] and not any("changed" in m for m in messages)
    (shipped / "decoding.json").write_text(
        '{"settings": {"steps": 2}, "chosen_on": "by hand"}', encoding="utf-8"
    )
    messages.clear()
    run_reproduce(cfg, out, ("compare",), progress=False, log=messages.append)
    why = "[compare] a given checkpoint changed since this run used it"
    assert f"{why}: redoing compare; report will run again without --stages" in messages
    assert not (out / "stages" / "report.json").exists()
    fingerprints = StageRecord.read(out / "stages" / "compare.json").fingerprints
    assert fingerprints == {str(shipped): checkpoint_fingerprint(shipped)}


def test_off_by_default_and_checked_before_the_first_stage(tmp_path: Path) -> None:
    assert not load_reproduce_config("multi30k").compare.enabled
    for extra, message in (
        ([], "compare.against is empty"),
        ([f"compare.against=[{tmp_path / 'missing'}]"], "missing: no such folder"),
    ):
        cfg = load_reproduce_config("smoke", ["compare.enabled=true", *extra])
        with pytest.raises(GmlmError, match=message):
            run_reproduce(cfg, tmp_path / "run", ("compare",), progress=False, log=print)
        assert not (tmp_path / "run" / "compare").exists()
