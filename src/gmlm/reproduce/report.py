"""REPORT.md of a reproduction run, with its plots, from what the stages wrote.

Reads the typed results of the run folder (eval/scores.json or eval/examples.json,
calibrate/calibrate.json, bench/bench.json, attention/attention.json, length/length.json,
theory/verify.json, stages/*.json) and the trainers' validation records, draws the figures
(:mod:`gmlm.reproduce.plots`; the bench's trade-offs: :mod:`gmlm.bench.plots`), and puts the
30-second summary (:mod:`gmlm.reproduce.summary`) and the sections
(:mod:`gmlm.reproduce.sections`) together under a header that says when, on what hardware
and with which software the report was written (:mod:`gmlm.provenance`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from gmlm import provenance
from gmlm.analysis.results import (
    AblationResult,
    AttentionResult,
    CalibrationResult,
    ComparisonResult,
    LengthResult,
)
from gmlm.bench.plots import plot_tradeoffs
from gmlm.bench.result import BenchResult
from gmlm.checkpoint.languages import pair_name, pair_of
from gmlm.checkpoint.meta import META_FILE, Meta
from gmlm.data.binarized import load_dataset
from gmlm.errors import GmlmError
from gmlm.evaluation.results import EvaluationScores
from gmlm.io import REPRODUCE_FILE, atomic_write_text
from gmlm.reproduce import plots, sections, summary
from gmlm.reproduce.config import STAGE_REGISTRY, STAGES, ReproduceConfig
from gmlm.reproduce.metrics import validations
from gmlm.reproduce.publish import TITLE
from gmlm.reproduce.stage_record import StageRecord
from gmlm.reproduce.stand_in import ExampleTranslations
from gmlm.reproduce.train_ablation import TrainAblationResult
from gmlm.theory.verify import VerifyReport

# Each training stage and the report's name for the model it trains.
TRAINED_RUNS = tuple((stage.name, stage.system) for stage in STAGE_REGISTRY if stage.system)


def chosen_checkpoints(cfg: ReproduceConfig, out: Path, runs: list[str]) -> list[str]:
    """Which step's checkpoint the evaluation used, per run: "AR step 1500"."""
    labels = dict(TRAINED_RUNS)
    chosen = []
    for name in runs:
        folder = out / name / cfg.checkpoint
        if (folder / META_FILE).is_file():
            chosen.append(f"{labels[name]} step {Meta.of(folder).step}")
    return chosen


def header(cfg: ReproduceConfig, direction: str | None) -> list[str]:
    """Title, description, the corpus and direction, and when and on what it was written."""
    data = f"Data: {cfg.data.corpus}" + (f", translating {direction}" if direction else "")
    return [
        f"{TITLE}`{cfg.preset}`",
        "",
        cfg.description,
        "",
        f"{data}.",
        "",
        f"Written {dt.datetime.now():%Y-%m-%d %H:%M}. Hardware: {provenance.hardware()}. "
        "Software: " + ", ".join(f"{k} {v}" for k, v in provenance.software().items()) + ".",
        "",
    ]


def _direction(data: Path) -> str | None:
    """The run's translation direction, "src-tgt" from its prepared data's manifest (None
    where the data or its languages are not recorded)."""
    try:
        manifest = load_dataset(data).manifest
    except (OSError, GmlmError):
        return None
    pair = pair_of(manifest)
    return None if pair is None else pair_name(pair)


def write_report(cfg: ReproduceConfig, out: Path) -> Path:
    """Write OUT/REPORT.md and its figures (OUT/figures); returns the report's path."""
    figures = out / "figures"

    def link(path: Path | None) -> str | None:
        return None if path is None else str(path.relative_to(out))

    scores = EvaluationScores.read_if_present(out / "eval" / "scores.json")
    bench = BenchResult.read_if_present(out / "bench" / "bench.json")
    attention = AttentionResult.read_if_present(out / "attention" / "attention.json")
    length = LengthResult.read_if_present(out / "length" / "length.json")
    calibration = CalibrationResult.read_if_present(out / "calibrate" / "calibrate.json")
    ablation = AblationResult.read_if_present(out / "ablation" / "ablation.json")
    comparison = ComparisonResult.read_if_present(out / "compare" / "compare.json")
    trained = TrainAblationResult.read_if_present(out / "train_ablation" / "train_ablation.json")
    examples = ExampleTranslations.read_if_present(out / "eval" / "examples.json")
    verify = VerifyReport.read_if_present(out / "theory" / "verify.json")
    records = {
        name: StageRecord.read_if_present(out / "stages" / f"{name}.json") for name in STAGES
    }

    direction = _direction(out / "data")
    lines = header(cfg, direction)
    lines += summary.summary_section(summary.headline(cfg, out, scores, bench, attention))
    lines += sections.targets_section(cfg.targets, scores, bench)
    if scores is not None:
        plot = plots.plot_bleu_vs_steps(scores, figures / "bleu_vs_steps.png")
        lines += sections.quality_section(scores, link(plot), direction)
    if examples is not None:
        lines += sections.examples_section(examples, (sections.AR_SYSTEM, sections.PADIR_SYSTEM))
    if bench is not None:
        plot = plots.plot_latency_vs_batch(bench, figures / "latency_vs_batch.png")
        tradeoffs = plot_tradeoffs(bench, figures)
        shown = [(figure.caption, str(figure.path.relative_to(out))) for figure in tradeoffs]
        lines += sections.speed_section(bench, link(plot), shown)
    if calibration is not None:
        lines += sections.calibration_section(calibration, dict(TRAINED_RUNS))
    if comparison is not None:
        lines += sections.comparison_section(comparison)
    if ablation is not None:
        lines += sections.ablation_section(ablation)
    if attention is not None:
        lines += sections.attention_section(attention)
    if length is not None:
        lines += sections.length_section(length)
    if trained is not None:
        lines += sections.train_ablation_section(trained)
    curves = {name: validations(out / name / "metrics.jsonl") for name, _ in TRAINED_RUNS}
    curves = {name: records for name, records in curves.items() if records}
    if curves:
        labels = dict(TRAINED_RUNS)
        plot = plots.plot_validation(curves, labels, figures / "valid_bleu_vs_step.png")
        chosen = chosen_checkpoints(cfg, out, list(curves))
        lines += sections.training_section(cfg, curves, labels, chosen, link(plot))
    if verify is not None:
        drawn = [
            name
            for name, _ in sections.THEORY_FIGURES
            if (out / "theory" / f"{name}.png").is_file()
        ]
        lines += sections.theory_section(verify, drawn)
    lines += sections.stage_section(records)
    lines += sections.commands_section(cfg, out)
    config_text = (out / REPRODUCE_FILE).read_text(encoding="utf-8")
    lines += ["## Resolved configuration", "", "```yaml", config_text.rstrip(), "```", ""]
    path = out / "REPORT.md"
    atomic_write_text(path, "\n".join(lines))
    return path
