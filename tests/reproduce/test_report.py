"""REPORT.md from a fixed run folder: the same bytes as the golden file.

tests/fixtures/run holds what the stages of a small pipeline run wrote (JSON results, stage
records, training metrics and checkpoint metadata; no figures of the theory stage). The report
stage renders it; the one line that depends on the moment and the machine (date, hardware,
software) and the run folder's path are normalised before the comparison.

That run's models had learned nothing (every BLEU and stutter rate 0.00), so the scores of
eval/scores.json (and the BLEUs of stages/evaluate.json and of the teacher's validations)
were set by hand to distinct plausible values: no two columns, and no two rows of a column,
of the quality and stutter tables are alike, so a column or a row rendered in the wrong
place changes the report.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from gmlm.errors import GmlmError
from gmlm.evaluation.results import EvaluationScores
from gmlm.evaluation.stutter import repeat_report
from gmlm.reproduce import stages
from gmlm.reproduce.config import load_reproduce_config
from gmlm.reproduce.sections import quality_section

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = Path(__file__).resolve().parent / "golden" / "REPORT.md"


def render(tmp_path: Path) -> str:
    out = tmp_path / "run"
    shutil.copytree(FIXTURES / "run", out)
    cfg = load_reproduce_config(str(out / "reproduce.yaml"))
    stages.report(stages.Context(cfg, out, False, lambda _message: None))
    assert (out / "figures" / "bleu_vs_steps.png").is_file()
    assert (out / "figures" / "latency_vs_batch.png").is_file()
    assert (out / "figures" / "bleu_vs_latency.png").is_file()
    assert (out / "figures" / "bleu_vs_throughput.png").is_file()
    assert (out / "figures" / "valid_bleu_vs_step.png").is_file()
    text = (out / "REPORT.md").read_text(encoding="utf-8")
    written = "Written DATE. Hardware: HARDWARE. Software: SOFTWARE."
    text = re.sub(r"(?m)^Written .*$", written, text)
    return text.replace(str(out), "OUT")


def test_report_of_a_fixed_run_matches_the_golden_file(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    assert render(tmp_path) == GOLDEN.read_text(encoding="utf-8")


def test_every_stage_command_of_the_report_parses() -> None:
    """The report's command lines (rendered from the stages' settings) are ones gmlm takes:
    each parses with the real parser and gives the settings the stage used."""
    from gmlm.bench.settings import BenchSettings
    from gmlm.cli.main import build_parser
    from gmlm.cli.options import settings_from_args
    from gmlm.data.settings import PrepareSettings
    from gmlm.translation.distill_settings import DistillSettings

    block = GOLDEN.read_text(encoding="utf-8").split("Each stage alone")[1].split("```")[1]
    lines = [line.split(" > ")[0].split(" | ")[-1] for line in block.strip().splitlines()]
    parsed = {}
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "gmlm", line
        parsed[words[1]] = build_parser().parse_args(words[1:])
    cfg = load_reproduce_config(str(FIXTURES / "run" / "reproduce.yaml"))
    assert settings_from_args(BenchSettings, parsed["bench"]) == BenchSettings(
        **{f.name: getattr(cfg.bench, f.name) for f in dataclasses.fields(BenchSettings)}
    )
    assert parsed["data"].overrides == list(cfg.data.overrides)
    assert parsed["data"].corpus == cfg.data.corpus
    for command, cls, stage in (
        ("data", PrepareSettings, cfg.data),
        ("distill", DistillSettings, cfg.distill),
    ):
        given = settings_from_args(cls, parsed[command])
        assert given == cls(**{f.name: getattr(stage, f.name) for f in dataclasses.fields(cls)})
    assert parsed["distill"].batch_size == cfg.distill.batch_size


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("eval/scores.json", "bleu_signature"),
        ("bench/bench.json", "speedups"),
        ("theory/verify.json", "claims"),
        ("stages/data.json", "finished"),
    ],
)
def test_a_result_missing_a_key_is_an_error_naming_the_file_and_the_key(
    tmp_path: Path, name: str, key: str
) -> None:
    out = tmp_path / "run"
    shutil.copytree(FIXTURES / "run", out)
    data = json.loads((out / name).read_text(encoding="utf-8"))
    del data[key]
    (out / name).write_text(json.dumps(data), encoding="utf-8")
    cfg = load_reproduce_config(str(out / "reproduce.yaml"))
    with pytest.raises(GmlmError, match=rf"{re.escape(str(out / name))}: key '{key}' is missing"):
        stages.report(stages.Context(cfg, out, False, lambda _message: None))
    assert not (out / "REPORT.md").exists()


@pytest.mark.parametrize(
    "preset", ["smoke", "demo", "demo-en-de", "bible-tiny", "laptop", "multi30k"]
)
def test_every_command_of_the_reproduce_section_parses(preset: str) -> None:
    """The Reproduce section's commands are what the stages ran, flag for flag: each one is
    accepted by gmlm's own parser (a renamed or missing flag fails here)."""
    import shlex

    from gmlm.cli.main import build_parser
    from gmlm.reproduce.sections import commands_section

    cfg = load_reproduce_config(preset, ["length.enabled=true", "length.sentences=7"])
    text = "\n".join(commands_section(cfg, Path("OUT")))
    commands = [
        line.split("| ", 1)[-1].split(" > ")[0]
        for line in text.splitlines()
        if line.startswith(("gmlm ", "head "))
    ]
    assert any(c.startswith("gmlm analyze length ") for c in commands)
    parser = build_parser()
    for command in commands:
        args = parser.parse_args(shlex.split(command)[1:])
        assert callable(args.func), command
    ar1 = [c for c in commands if "out=OUT/ar1 " in c or "--ar1 " in c]
    assert len(ar1) == (2 if cfg.ar1.enabled else 0), ar1  # its training and the bench
    if cfg.evaluate.sentences > 0:  # the first N, scored against the first N references
        assert f"head -n {cfg.evaluate.sentences} OUT/data/test.src.txt | gmlm translate" in text
        assert "gmlm evaluate --hyp hyp.txt --ref OUT/eval/reference.txt" in text


def test_the_stutter_section_shows_repeated_ngrams() -> None:
    """Scores with repeated n-grams get their table (every system, the references as a
    control); the fixture's, of gmlm before they were measured, have none (the golden file)."""
    fixture = EvaluationScores.read(FIXTURES / "run" / "eval" / "scores.json")
    assert "Repeated n-grams" not in "\n".join(quality_section(fixture, None))
    padir = repeat_report(["a girl in a field in a field", "a dog"]).rounded()
    rows = tuple(
        dataclasses.replace(
            r,
            quality=dataclasses.replace(
                r.quality, ngram_repeats=padir if r.system == "padir-T4-B5" else None
            ),
        )
        for r in fixture.systems
    )
    scores = dataclasses.replace(
        fixture,
        systems=rows,
        reference_ngram_repeats=repeat_report(["a girl in a field", "a a dog dog"]).rounded(),
    )
    text = "\n".join(quality_section(scores, None))
    stutter = text.split("## Stutter")[1]
    assert (
        "| model | lines with a repeated phrase (2-4 words) | 1-gram: lines / per 100 words | "
        "2-gram: lines / per 100 words | 3-gram: lines / per 100 words | 4-gram: lines / per "
        "100 words |"
    ) in stutter
    none = "0.0% / 0.00"
    assert f"| PaDIR T=4 B=5 | 1 (50.0%) | {none} | {none} | 50.0% / 10.00 | {none} |" in stutter
    assert "| AR (distilled), beam 5 | n/a | n/a | n/a | n/a | n/a |" in stutter
    assert f"| reference (control) | 0 (0.0%) | 50.0% / 22.22 | {none} | {none} | {none} |" in (
        stutter
    )


def test_the_paper_column_is_the_runs_own_direction() -> None:
    """An English-German run shows the paper's WMT14 EN>DE numbers; a direction the paper
    does not have shows DE>EN, for scale, as a German-English run does."""
    fixture = EvaluationScores.read(FIXTURES / "run" / "eval" / "scores.json")
    en_de = "\n".join(quality_section(fixture, None, "en-de"))
    assert "| paper WMT14 EN>DE BLEU |" in en_de and "| 29.54 |" in en_de
    assert "| 33.5 |" not in en_de and "| 33.50 |" not in en_de
    for direction in ("de-en", "fr-en", None):
        text = "\n".join(quality_section(fixture, None, direction))
        assert "| paper WMT14 DE>EN BLEU |" in text and "29.54" not in text
