"""The Markdown sections of REPORT.md, each from the typed results of the stages.

Every number comes from a result the stages wrote (:mod:`gmlm.reproduce.report` reads them);
nothing is typed in by hand except the paper's published values, which are labelled as such.
A section whose results are missing is left out. Figures are drawn elsewhere
(:mod:`gmlm.reproduce.plots`): a section gets the link of its figure, or None.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gmlm import markdown
from gmlm.analysis.paper import PAPER_BLEU, PAPER_CORPUS, paper_bleu
from gmlm.analysis.results import (
    AblationResult,
    AttentionResult,
    CalibrationResult,
    ComparisonResult,
    LengthResult,
)
from gmlm.analysis.settings import CalibrationSettings
from gmlm.bench.result import BenchResult, BenchRow, speedup
from gmlm.decoding.options import PAPER_LENGTH_BEAM, PAPER_STEPS, RefinementOptions
from gmlm.evaluation.results import EvaluationScores
from gmlm.reproduce.config import (
    STAGE_DECODING,
    STAGES,
    ReproduceConfig,
    Targets,
    checkpoint_dir,
    given_as_is,
    stage_checkpoint,
)
from gmlm.reproduce.stage_record import StageRecord
from gmlm.reproduce.stand_in import EXAMPLES, LANGUAGE_NAMES, ExampleTranslations
from gmlm.reproduce.train_ablation import TrainAblationResult
from gmlm.settings import flags_of, to_argv
from gmlm.theory.verify import VerifyReport

# The targets' systems (config.Targets) in eval/scores.json: PaDIR T=4, B=5 against the AR
# model trained on the same (distilled) data, decoded with beam 5; and PaDIR with 10 passes.
PADIR_SYSTEM, AR_SYSTEM, PADIR_MORE_STEPS = "padir-T4-B5", "ar-beam5", "padir-T10-B5"
PADIR_BENCH, AR_BENCH = "padir T=4 B=5", "ar beam5"  # and in bench/bench.json
CT2_BENCH = "ar ct2 beam5"  # the same AR weights run by CTranslate2
AR1_BENCH = "ar1 beam5"  # the 1-layer-decoder AR baseline (the ar1 stage), when it ran
# The calibrate command's beam, left at its default on a PaDIR line (it sets AR beams only).
AR_BEAM = CalibrationSettings().ar_beam
AR_BLEU_FLOOR = 5.0
"""Below this BLEU the AR reference system has not learned; comparisons with it mean nothing
(an untrained beam search also stops early, which makes it look slow)."""
P99_MIN_SENTENCES = 100
"""Fewer timed sentences than this give no p99 verdict, and the summary leaves their p99 out:
the 99th percentile of a few dozen latencies is their slowest one or two (the demo's 15 timed
sentences gave a p99 speed-up of 1.33x where 200 gave 2.68x)."""
THEORY_FIGURES = (
    ("figure1", "Figure 1: pseudolikelihood estimation error vs samples, J = 0.05"),
    ("figure2", "Figure 2: the same with J = 0.3"),
    ("figure3", "Figure 3: hitting R_1 from R_-1, k-Gibbs vs the independent sampler"),
)


def table(header: list[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; None cells read n/a, floats get two decimals."""

    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value)

    return "\n".join(markdown.table(header, ([cell(v) for v in row] for row in rows)))


def _minutes(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 60:.1f} min"


def _figure(caption: str, link: str | None) -> list[str]:
    return [f"![{caption}]({link})", ""] if link else []


def not_meaningful(ar_bleu: float) -> str | None:
    """The verdict for a comparison with an AR system of `ar_bleu` that has not learned
    (below AR_BLEU_FLOOR), or None when the comparison means something."""
    if ar_bleu < AR_BLEU_FLOOR:
        return f"not meaningful: AR BLEU {ar_bleu:.2f}"
    return None


def subset_note(scores: EvaluationScores) -> str | None:
    """What part of its split the evaluation scored, when not all of it, else None."""
    if not scores.split_sentences:
        return None
    return (
        f"the first {scores.sentences} of the {scores.split} split's "
        f"{scores.split_sentences} sentences"
    )


def too_few_for_p99(sentences: int) -> str | None:
    """Why a p99 of `sentences` timed sentences gets no verdict, or None when it can."""
    if sentences >= P99_MIN_SENTENCES:
        return None
    return f"{sentences} timed sentences, too few for a p99, which needs {P99_MIN_SENTENCES}"


def targets_section(
    targets: Targets, scores: EvaluationScores | None, bench: BenchResult | None
) -> list[str]:
    """Met / missed for each of `targets` (see :class:`Targets`), from eval/scores.json and
    bench/bench.json; "not meaningful" for every row when AR beam 5 is below AR_BLEU_FLOOR;
    no verdict for the quality rows when the evaluation scored only the first sentences of
    its split (the whole split can say otherwise), nor for a p99 of too few timed sentences."""
    rows: list[list[str]] = []
    padir = ar = None
    subset = None
    if scores is not None:
        padir, ar = scores.system(PADIR_SYSTEM), scores.system(AR_SYSTEM)
        part = subset_note(scores)
        subset = f"no verdict on a subset: {part}" if part else None
    if padir and ar:
        p, a = padir.quality, ar.quality
        gap = a.bleu - p.bleu
        if targets.bleu_gap:
            rows.append(
                [
                    f"quality: {padir.label} within {targets.bleu_gap} BLEU of {ar.label}",
                    f"BLEU {p.bleu:.2f} vs {a.bleu:.2f} (gap {gap:+.2f})",
                    subset or _at_most(gap, targets.bleu_gap, " BLEU"),
                ]
            )
        if targets.stutter_ratio:
            rows.append(
                [
                    f"stutter: {padir.label} at most {targets.stutter_ratio}x {ar.label}'s",
                    f"{p.stutter_per_100_words:.2f} vs {a.stutter_per_100_words:.2f} "
                    "stuttered words per 100",
                    subset
                    or _at_most(
                        p.stutter_per_100_words,
                        targets.stutter_ratio * a.stutter_per_100_words,
                        " per 100 words",
                    ),
                ]
            )
    if ar and targets.ar_bleu:
        rows.append(
            [
                f"quality: {ar.label} at {targets.ar_bleu} BLEU or more",
                f"BLEU {ar.quality.bleu:.2f}",
                subset or _at_least(ar.quality.bleu, targets.ar_bleu, " BLEU"),
            ]
        )
    more = scores.system(PADIR_MORE_STEPS) if scores is not None else None
    if padir and more and targets.more_steps:
        rows.append(
            [
                f"quality: {more.label} at least as good as {padir.label}",
                f"BLEU {more.quality.bleu:.2f} vs {padir.quality.bleu:.2f}",
                subset or _at_least(more.quality.bleu, padir.quality.bleu, " BLEU"),
            ]
        )
    fastest = fastest_rows(bench) if bench is not None else {}
    timed = fastest.get(PADIR_BENCH)
    speed = (
        (targets.speedup_p50, AR_BENCH, "p50"),
        (targets.speedup_p99, AR_BENCH, "p99"),
        (targets.ctranslate2_speedup, CT2_BENCH, "p50"),
    )
    for target, other, statistic in speed:
        baseline = fastest.get(other)
        if not target or timed is None or baseline is None:
            continue
        ours, theirs = (getattr(r.e2e, f"{statistic}_ms") for r in (timed, baseline))
        ratio = speedup(theirs, ours)
        few = too_few_for_p99(bench.settings.sentences) if bench and statistic == "p99" else None
        rows.append(
            [
                f"speed: {PADIR_BENCH} at least {target}x as fast as {other}, batch-1 "
                f"{'median' if statistic == 'p50' else statistic}",
                f"{ours:.2f} ms ({timed.precision}) vs {theirs:.2f} ms ({baseline.precision}): "
                f"{ratio:.2f}x",
                f"no verdict: {few}" if few else _at_least(ratio, target, "x"),
            ]
        )
    if not rows:
        return []
    unlearned = not_meaningful(ar.quality.bleu) if ar else None
    if unlearned:
        rows = [[target, measured, unlearned] for target, measured, _ in rows]
    return [
        "## Targets",
        "",
        table(["target", "measured", "verdict"], rows),
        "",
        "Computed from eval/scores.json and bench/bench.json of this run. Speed: text in, text "
        "out, each system in the precision of the bench where its batch-1 median is lowest "
        "(the p99 row compares the same rows).",
        "",
    ]


def fastest_rows(bench: BenchResult) -> dict[str, BenchRow]:
    """Each system's bench row of the precision with the lowest batch-1 median (text in,
    text out); the first precision wins a tie."""
    best: dict[str, BenchRow] = {}
    for row in bench.results:
        if row.system not in best or row.e2e.p50_ms < best[row.system].e2e.p50_ms:
            best[row.system] = row
    return best


def _at_least(value: float, target: float, unit: str) -> str:
    return "met" if value >= target else f"missed by {target - value:.2f}{unit}"


def _at_most(value: float, target: float, unit: str) -> str:
    return "met" if value <= target else f"missed by {value - target:.2f}{unit}"


def paper_direction(direction: str | None) -> str:
    """The column of the paper's Table 1 a run's quality table shows: its own direction
    (source-target, e.g. "en-de") where the paper has it, else WMT14 DE>EN, for scale."""
    return direction if direction in PAPER_BLEU else "de-en"


def quality_section(
    scores: EvaluationScores, plot: str | None, direction: str | None = None
) -> list[str]:
    """Table 1's layout with the paper's column of the run's `direction` (see
    :func:`paper_direction`), the BLEU-vs-steps figure, and stutter."""
    column = paper_direction(direction)
    corpus = PAPER_CORPUS[column]
    src, tgt = (side.upper() for side in column.split("-"))
    rows = []
    for r in scores.systems:
        paper = paper_bleu(column, r.system) if r.run in ("ar", "padir") else None
        steps = "N" if r.steps is None else r.steps
        hyps = r.beam if r.length_beam is None else r.length_beam
        q = r.quality
        rows.append([r.label, steps, hyps, q.bleu, q.chrf, q.length_ratio, paper])
    part = subset_note(scores)
    lines = [
        "## Translation quality (the paper's Table 1 layout)",
        "",
        (
            part[:1].upper() + part[1:]
            if part
            else f"{scores.split} split ({scores.sentences} sentences)"
        )
        + f", decoded in {scores.precision}. Steps: refinement passes T (N = autoregressive, "
        "one pass per token). # hyp.: beam size (AR) or predicted lengths decoded, B (PaDIR).",
        "",
        table(
            [
                "model",
                "steps",
                "# hyp.",
                "BLEU",
                "chrF",
                "length ratio",
                f"paper {corpus} {src}>{tgt} BLEU",
            ],
            rows,
        ),
        "",
        "Length ratio: hypothesis / reference length in BLEU tokens (below 1 the brevity "
        "penalty applies). "
        f"BLEU signature: `{scores.signatures.bleu}`; chrF signature: "
        f"`{scores.signatures.chrf}`. The paper column is the published result on {corpus} "
        "(a different, larger corpus, 67M-parameter models, 500k TPU steps): for scale, not a "
        "like-for-like comparison.",
        "",
    ]
    from gmlm.decoding import RefinementOptions

    defaults = RefinementOptions()
    lines += _figure("BLEU vs refinement steps", plot)
    lines += [
        "## Stutter",
        "",
        "Stutter: adjacent repeated words in a hypothesis beyond those in its reference, per "
        "100 hypothesis words; repeats: all adjacent repeated words per 100 words. PaDIR "
        f"decodes with gmlm's defaults (stutter remasking '{defaults.stutter_remask}' of "
        f"repeated tokens and n-grams of up to {defaults.stutter_ngram} tokens, such repeats "
        f"{'dropped from' if defaults.dedup else 'kept in'} the output"
        f"{_words_note(defaults)}), so its rates "
        "are measured after those fixes; the attention analysis below counts stutter on the "
        "raw output, before dedup.",
        "",
        table(
            ["model", "stutter / 100 words", "repeats / 100 words"],
            [
                [r.label, r.quality.stutter_per_100_words, r.quality.repeats_per_100_words]
                for r in scores.systems
            ]
            + [["reference (control)", None, scores.reference_repeats_per_100_words]],
        ),
        "",
    ]
    return lines + _ngram_repeats_table(scores)


def _ngram_repeats_table(scores: EvaluationScores) -> list[str]:
    """The immediately repeated n-grams of every system and of the references (none for an
    eval/scores.json of gmlm before they were measured)."""
    from gmlm.evaluation.stutter import NGRAM_ORDERS, RepeatReport

    if scores.reference_ngram_repeats is None:
        return []

    def cells(r: RepeatReport | None) -> list[str | None]:
        if r is None:
            return [None] * (len(NGRAM_ORDERS) + 1)
        return [
            f"{r.phrase_lines} ({100 * r.phrase_line_share:.1f}%)",
            *(f"{100 * g.line_share:.1f}% / {g.per_100_words:.2f}" for g in r.ngrams),
        ]

    return [
        "Repeated n-grams: an n-gram of words immediately repeated (words[i:i+n] == "
        "words[i+n:i+2n], the words of the stutter metric; n = 1 is the adjacent repeat "
        "above): the share of lines with one / such repeats per 100 words; a repeated phrase "
        "is one of 2-4 words ('in a field in a field').",
        "",
        table(
            [
                "model",
                "lines with a repeated phrase (2-4 words)",
                *(f"{n}-gram: lines / per 100 words" for n in NGRAM_ORDERS),
            ],
            [[r.label, *cells(r.quality.ngram_repeats)] for r in scores.systems]
            + [["reference (control)", *cells(scores.reference_ngram_repeats)]],
        ),
        "",
    ]


def speed_section(
    bench: BenchResult, plot: str | None, tradeoffs: Sequence[tuple[str, str]] = ()
) -> list[str]:
    """The bench's report, its trade-off plots first (`tradeoffs`: (caption, link) pairs)."""
    from gmlm.bench import render_markdown

    return [
        "## Speed",
        "",
        render_markdown(bench, tradeoffs).strip(),
        "",
        *_figure("latency per sentence vs batch size", plot),
    ]


def attention_section(attention: AttentionResult) -> list[str]:
    from gmlm.analysis.attention import render_markdown

    return [
        "## Attention analysis of stuttering (Tables 4 and 5)",
        "",
        render_markdown(attention).strip(),
        "",
    ]


def calibration_section(result: CalibrationResult, labels: dict[str, str]) -> list[str]:
    """Each calibrated model's grid on the validation split, the chosen value in bold."""
    lines = [
        "## Length calibration (validation)",
        "",
        "Each student's length setting, chosen on the validation split before the test set "
        "was scored (`gmlm.analysis.calibration`): PaDIR's `length_shift` (added to its "
        "predicted lengths) and the AR beam search's `length_penalty`. The best value of a "
        "grid became the checkpoint's decoding default (its decoding.json, used by every later "
        "stage and by `gmlm translate`) only if it beat the default's BLEU by more than the "
        "margin.",
        "",
    ]
    rows: list[list[Any]] = []
    for run, m in result.models.items():
        given = " ".join(f"{k}={v}" for k, v in m.decoding.items())
        for r in m.rows:
            rows.append(
                [
                    f"{labels.get(run, run)}{', ' + given if given else ''}",
                    f"`{m.setting}` = {m.label(r.value)}",
                    r.bleu,
                    r.length_ratio,
                ]
            )
    lines += [table(["model", "setting", "BLEU", "length ratio"], rows), ""]
    first = next(iter(result.models.values()), None)
    if first is not None:
        lines += [
            f"{first.split} split, {first.sentences} pairs; margin {first.min_gain:g} BLEU. "
            f"BLEU signature: `{first.bleu_signature}`.",
            "",
        ]
    return lines


def ablation_section(ablation: AblationResult) -> list[str]:
    from gmlm.analysis.ablation import render_ablation_markdown

    return [
        "## Decoding ablation (validation)",
        "",
        "`gmlm analyze ablation`: PaDIR's default decoding against each variant, on the "
        "validation split where decoding settings are chosen (the test set is scored after).",
        "",
        render_ablation_markdown(ablation).strip(),
        "",
    ]


def comparison_section(comparison: ComparisonResult) -> list[str]:
    from gmlm.analysis.comparison import render_comparison_markdown

    return [
        "## Against the current model (validation)",
        "",
        "`gmlm analyze compare`: the checkpoints this run's PaDIR would replace, then the run's "
        "PaDIR (last row), each with its own decoding defaults, on the validation split; p: "
        "against the first row. A checkpoint replaces another on a significant win here, "
        "before the test set is scored.",
        "",
        render_comparison_markdown(comparison).strip(),
        "",
    ]


def train_ablation_section(result: TrainAblationResult) -> list[str]:
    """Each training variant's validation at the compared step against the padir run's."""
    base = result.baseline

    def change(value: float | None, reference: float | None) -> str | None:
        return None if value is None or reference is None else f"{value - reference:+.2f}"

    rows: list[list[Any]] = [
        ["the padir run (every change on)", base.bleu, None, base.loss, None, base.length_loss]
    ]
    for r in result.rows:
        rows.append(
            [
                f"`{r.variant}`" + (f" ({r.precision})" if r.precision else ""),
                r.bleu,
                change(r.bleu, base.bleu),
                r.loss,
                change(r.loss, base.loss),
                r.length_loss,
            ]
        )
    return [
        "## Training ablation (validation)",
        "",
        f"PaDIR retrained for {result.steps:,} steps with each setting switched back, against "
        f"the padir run's own validation at step {result.steps:,} (same data, seed and "
        "schedule, so the runs differ by the setting alone up to that step): an early-training "
        "effect of one seed, not the final one. BLEU on the trainer's first validation "
        "sentences (noisy: about +-1 BLEU on 200), loss on the whole validation split "
        "(label-smoothed token loss plus the weighted length loss, so a variant that changes "
        "the loss itself is not comparable on it).",
        "",
        table(
            ["run", "valid BLEU", "change", "valid loss", "change", "length loss"],
            rows,
        ),
        "",
    ]


def length_section(length: LengthResult) -> list[str]:
    from gmlm.analysis.length import render_length_markdown

    return [
        "## Length prediction",
        "",
        "`gmlm analyze length`: how often PaDIR's length predictor finds the reference length, "
        "and the BLEU of decoding with the reference length (an oracle).",
        "",
        render_length_markdown(length).strip(),
        "",
    ]


def examples_section(examples: ExampleTranslations, systems: Sequence[str]) -> list[str]:
    """The example sentences and their translations by `systems` (keys of `examples`; those
    it lacks are left out), when they stood in for the test set."""
    shown = [key for key in systems if key in examples.translations]
    rows = [
        [source, *(examples.translations[key][i] for key in shown)]
        for i, source in enumerate(examples.sources)
    ]
    return [
        "## Example translations",
        "",
        f"gmlm's own example sentences ({EXAMPLES.name}.{examples.source_lang}, not a test "
        "set: no scores), "
        "translated by the checkpoints of this run; every system's output is in "
        "eval/examples.json.",
        "",
        table(
            [
                LANGUAGE_NAMES.get(examples.source_lang, examples.source_lang),
                *(examples.labels[key] for key in shown),
            ],
            [[cell.replace("|", "\\|") for cell in row] for row in rows],
        ),
        "",
    ]


def training_section(
    cfg: ReproduceConfig,
    curves: dict[str, list[dict[str, Any]]],
    labels: dict[str, str],
    chosen: list[str],
    plot: str | None,
) -> list[str]:
    """Validation BLEU and loss of each trained model over its steps (`curves`: run name ->
    its validation records), and which checkpoint the evaluation used (`chosen`: one phrase
    per run). Too little training or overfitting shows here."""
    if not curves:
        return []
    steps = sorted({int(r["step"]) for records in curves.values() for r in records})
    rows = []
    for step in steps:
        row: list[Any] = [step]
        for name in curves:
            record = next((r for r in curves[name] if int(r["step"]) == step), None)
            bleu = None if record is None else record.get("valid_bleu")
            loss = None if record is None else record["valid_loss"]
            row += [None if bleu is None else round(bleu, 2), loss]
        rows.append(row)
    header = ["step"]
    for name in curves:
        header += [f"{labels[name]} BLEU", f"{labels[name]} loss"]
    plateau = plateau_lines(curves, labels)
    return [
        "## Training",
        "",
        "Validation after every `valid_every` steps: BLEU of the first `valid_sentences` "
        "validation sentences (AR greedy; PaDIR with `valid_steps` passes and 5 lengths) and "
        "the validation loss (label-smoothed token loss, plus the length loss for PaDIR) "
        f"over the whole validation split. The evaluation uses the `{cfg.checkpoint}` "
        "checkpoint of each run: " + (", ".join(chosen) or "n/a") + ".",
        "",
        table(header, rows),
        "",
        *([*(f"- {line}" for line in plateau), ""] if plateau else []),
        *_figure("validation BLEU vs training step", plot),
    ]


PLATEAU_BLEU = 0.5
"""A run counts as plateaued when the least-squares line through its validation BLEU over the
last quarter of its steps rises by less than this much across that quarter: the BLEU of 200
validation sentences moves by about 1 between neighbouring validations, so a smaller trend
is not a rise one can see."""


def plateau_lines(curves: dict[str, list[dict[str, Any]]], labels: dict[str, str]) -> list[str]:
    """Per run with validation BLEU at 3 or more steps of the last quarter of its training
    (steps after 3/4 of its last validated step): the BLEU there, the fitted change across
    that quarter, and whether that is a plateau (:data:`PLATEAU_BLEU`)."""
    lines = []
    for name, records in curves.items():
        points = [
            (int(r["step"]), r["valid_bleu"]) for r in records if r.get("valid_bleu") is not None
        ]
        if not points:
            continue
        last = points[-1][0]
        tail = [(step, bleu) for step, bleu in points if step > 0.75 * last]
        if len(tail) < 3:
            continue
        steps, bleus = [float(s) for s, _ in tail], [float(b) for _, b in tail]
        mean_step, mean_bleu = sum(steps) / len(steps), sum(bleus) / len(bleus)
        slope = sum((s - mean_step) * (b - mean_bleu) for s, b in zip(steps, bleus, strict=True))
        slope /= sum((s - mean_step) ** 2 for s in steps)
        change = slope * (steps[-1] - steps[0])
        verdict = (
            "a plateau"
            if change < PLATEAU_BLEU
            else "still rising: more steps would likely raise it further"
        )
        lines.append(
            f"{labels[name]}: validation BLEU {bleus[0]:.2f} at step {tail[0][0]:,} to "
            f"{bleus[-1]:.2f} at step {last:,} ({len(tail)} validations in the last quarter "
            f"of its training; fitted change across them {change:+.2f} BLEU): {verdict} "
            f"(a fitted rise below {PLATEAU_BLEU} BLEU counts as one)."
        )
    return lines


def theory_section(verify: VerifyReport, figures: Sequence[str]) -> list[str]:
    """The claims of `gmlm theory verify` and the paper's figures (`figures`: the names of
    THEORY_FIGURES drawn under theory/)."""
    lines = ["## Theory", "", "Exact checks (`gmlm theory verify`):", ""]
    lines.append(
        table(
            ["claim", "measure", "worst", "where", "checks", "passed"],
            [
                [k, v.kind, f"{v.worst:.3e}", v.at, v.checks, v.passed]
                for k, v in verify.claims.items()
            ],
        )
    )
    lines += [
        "",
        "Measures are scale-free, from the generalised eigenvalues of the two sides A, B (those "
        "of A^-1/2 B A^-1/2): a residual of a claimed identity (max |eigenvalue - 1|) must not "
        "exceed the tolerance; a margin of a claimed inequality A >= B (1 - the largest "
        "eigenvalue) must not fall below minus the tolerance. Tolerance "
        f"{verify.settings.tol:g}; {verify.seconds:.1f} s.",
    ]
    lines.append("")
    for name, caption in THEORY_FIGURES:
        if name in figures:
            lines += [f"![{caption}](theory/{name}.png)", ""]
    return lines


def stage_section(records: dict[str, StageRecord | None]) -> list[str]:
    """Wall time per stage (`records`: stage -> its record, None when not run)."""
    rows: list[list[Any]] = []
    for name in STAGES:
        record = records.get(name)
        if name == "report":  # the stage writing this file; a record of it is a past run's
            rows.append([name, "now", None, None])
        elif record is None:
            rows.append([name, "not run", None, None])
        else:
            rows.append(
                [name, record.finished, _minutes(record.seconds), _minutes(record.train_seconds)]
            )
    return [
        "## Time per stage",
        "",
        table(["stage", "finished", "wall time (last invocation)", "training time (total)"], rows),
        "",
        "A resumed stage's wall time covers only its last invocation; training time is the "
        "trainer's own total across resumptions.",
        "",
    ]


def commands_section(cfg: ReproduceConfig, out: Path) -> list[str]:
    """How to rerun the whole run, and each stage alone with the settings the stage used."""
    ar, ar1, padir, teacher = (
        checkpoint_dir(cfg, out, name) for name in ("ar", "ar1", "padir", "teacher")
    )
    e, a, g, b = cfg.evaluate, cfg.attention, cfg.length, cfg.ablation
    data = f"{out}/data"
    padir_data = {"--checkpoint": padir, "--data": data}
    source = f"{out}/data/{e.split}.src.txt"
    translate = (
        f"gmlm translate --checkpoint {padir} --steps {PAPER_STEPS} "
        f"--length-beam {PAPER_LENGTH_BEAM}"
    )
    if e.sentences > 0:  # the evaluation scores the first sentences against eval/reference.txt
        translate = f"head -n {e.sentences} {source} | {translate} > hyp.txt"
        reference = f"{out}/eval/reference.txt"
    else:
        translate = f"{translate} --input {source} > hyp.txt"
        reference = f"{out}/data/{e.split}.tgt.txt"
    return [
        "## Reproduce",
        "",
        f"`gmlm reproduce --preset {cfg.preset} --out {out}` (plus any key=value overrides "
        "given to this run); the resolved configuration below reproduces it exactly as a "
        "preset file:",
        "",
        "```",
        f"gmlm reproduce --preset {out}/reproduce.yaml --out NEW_FOLDER",
        "```",
        "",
        "Each stage alone (what the pipeline runs):",
        "",
        "```",
        _command(
            "gmlm data prepare",
            {"--corpus": cfg.data.corpus},
            cfg.data,
            [
                *("--out", f"{out}/data"),
                *(("--tokenizer", cfg.data.tokenizer) if cfg.data.tokenizer else ()),
                *cfg.data.overrides,
            ],
        ),
        *_training_commands(cfg, out),
        *_calibrate_commands(cfg, out),
        *_compare_commands(cfg, out, padir),
        *([_command("gmlm analyze ablation", padir_data, b)] if b.enabled else []),
        translate,
        f"gmlm evaluate --hyp hyp.txt --ref {reference}",
        _command(
            "gmlm bench",
            {"--ar": ar, "--padir": padir}
            | ({"--teacher": teacher} if cfg.distill.enabled else {})
            | ({"--ar1": ar1} if cfg.ar1.enabled else {})
            | {"--data": f"{out}/data"},
            cfg.bench,
        ),
        *(
            [_command("gmlm analyze attention", padir_data, a, _stage_decoding(a))]
            if a.enabled
            else []
        ),
        *(
            [_command("gmlm analyze length", padir_data, g, _stage_decoding(g))]
            if g.enabled
            else []
        ),
        "```",
        "",
    ]


def _training_commands(cfg: ReproduceConfig, out: Path) -> list[str]:
    """The teacher and its distillation (when the run distills), then each student the run
    trains (not those given as checkpoints)."""
    students = "distill" if cfg.distill.enabled else "data"
    commands = []
    if cfg.distill.enabled:
        teacher = checkpoint_dir(cfg, out, "teacher")
        commands += [
            f"gmlm train --config {cfg.teacher.preset} data={out}/data out={out}/teacher "
            + " ".join(cfg.teacher.overrides),
            _command(
                "gmlm distill",
                {"--teacher": teacher, "--data": f"{out}/data", "--out": f"{out}/distill"},
                cfg.distill,
                ["--batch-size", str(cfg.distill.batch_size)],
            ),
        ]
    stages = [
        ("ar", cfg.ar),
        *([("ar1", cfg.ar1)] if cfg.ar1.enabled else []),
        ("padir", cfg.padir),
    ]
    commands += [
        f"gmlm train --config {stage.preset} data={out}/{students} out={out}/{name} "
        + " ".join(stage.overrides)
        for name, stage in stages
        if not stage.checkpoint
    ]
    return commands + _tune_commands(cfg, out)


def _tune_commands(cfg: ReproduceConfig, out: Path) -> list[str]:
    """The AR baseline's distillation and PaDIR's fine-tuning on it, when the run tunes."""
    if not cfg.tune.enabled:
        return []
    padir = stage_checkpoint(cfg, out, "padir")
    tuned = f"{out}/tune-distill"
    return [
        _command(
            "gmlm distill",
            {"--teacher": checkpoint_dir(cfg, out, "ar"), "--data": f"{out}/data", "--out": tuned},
            dataclasses.replace(cfg.distill, beam=cfg.tune.beam),
            ["--batch-size", str(cfg.distill.batch_size)],
        ),
        f"gmlm train --config {padir}/config.yaml data={tuned} out={out}/tune "
        + " ".join([f"init_from={padir}", *cfg.tune.overrides]),
    ]


def _calibrate_commands(cfg: ReproduceConfig, out: Path) -> list[str]:
    """The calibration of each student the run trains, when the run calibrates."""
    c = cfg.calibrate
    if not c.enabled:
        return []
    grids = [
        ("ar", _numbers(c.length_penalties)),
        *([("ar1", _numbers(c.length_penalties))] if cfg.ar1.enabled else []),
        ("padir", _numbers(c.length_shifts)),
    ]
    return [
        _command(
            "gmlm analyze calibrate",
            {"--checkpoint": checkpoint_dir(cfg, out, name), "--data": f"{out}/data"},
            c if name != "padir" else dataclasses.replace(c, ar_beam=AR_BEAM),
            [f"--values={values}"],
        )
        for name, values in grids
        if not given_as_is(cfg, name)
    ]


def _compare_commands(cfg: ReproduceConfig, out: Path, padir: Path) -> list[str]:
    """The compare stage's command: its first checkpoint as --checkpoint, the rest and the
    run's PaDIR as --against."""
    c = cfg.compare
    if not c.enabled or not c.against:
        return []
    first, *rest = c.against
    rows = dataclasses.replace(c, against=(*rest, str(padir)))
    paths = {"--checkpoint": first, "--data": f"{out}/data"}
    return [_command("gmlm analyze compare", paths, rows)]


def _command(
    name: str, paths: Mapping[str, object], settings: Any, extra: Sequence[str] = ()
) -> str:
    """The command line `name` with the flags of `paths` (flag -> path), then those of the
    command's `settings` that are not its defaults (:func:`gmlm.settings.to_argv`), then
    `extra` words."""
    words = [name, *(word for flag, path in paths.items() for word in (flag, str(path)))]
    return " ".join(words + [shlex.quote(word) for word in [*to_argv(settings), *extra]])


def _stage_decoding(stage: Any) -> list[str]:
    """The decoding flags of what an analysis stage fixes (config.STAGE_DECODING), each given
    whatever its value: the command's default is the checkpoint's."""
    fixed = {name: getattr(stage, name) for name in STAGE_DECODING if hasattr(stage, name)}
    return flags_of(RefinementOptions, fixed)


def _numbers(values: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in values)


def _words_note(defaults: RefinementOptions) -> str:
    """What the final dedup does to the output's words, for the stutter section's note."""
    if not (defaults.dedup and defaults.dedup_words):
        return ""
    return (
        f", as are repeated runs of up to {defaults.stutter_ngram} words the tokens hid, in "
        "another case or other pieces"
    )
