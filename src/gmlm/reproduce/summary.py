"""The 30-second summary at the top of REPORT.md, and the last lines `gmlm reproduce` prints.

    from gmlm.reproduce.summary import read_headline, summary_section

    headline = read_headline(cfg, Path("runs/demo"))   # from the results the stages wrote
    print("\\n".join(summary_section(headline)))

Three headline numbers, each from a typed result of the run folder: the quality gap (PaDIR
T=4 B=5 against AR beam 5, eval/scores.json), the batch-1 speed-up (median and p99 of AR beam
5 over PaDIR T=4 B=5, text in and text out, each in its fastest precision of bench/bench.json;
with the median over the 1-layer-decoder AR beam 5 too when the `ar1` stage ran) and PaDIR's
stutter (per 100 words, eval/scores.json); then one sentence on the attention tables
(attention/attention.json). Quality scored on the first `evaluate.sentences` of the split
says so, with the command that scores all of it, and the Targets table gives it no verdict;
a p99 of fewer than `sections.P99_MIN_SENTENCES` timed sentences is left out. A comparison
with an AR system that has not learned says so instead of giving a verdict
(:func:`gmlm.reproduce.sections.not_meaningful`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gmlm.analysis.results import GROUPS, AttentionResult, MeanStd
from gmlm.bench.result import BenchResult, speedup
from gmlm.data.corpora import multi30k_pair
from gmlm.errors import GmlmError
from gmlm.evaluation.results import EvaluationScores
from gmlm.reproduce.config import ReproduceConfig
from gmlm.reproduce.sections import (
    AR1_BENCH,
    AR_BENCH,
    AR_SYSTEM,
    PADIR_BENCH,
    PADIR_SYSTEM,
    fastest_rows,
    not_meaningful,
    subset_note,
    too_few_for_p99,
)
from gmlm.reproduce.stand_in import MULTI30K_SOURCE, stand_in_reason

PAPER_CROSS_TV = (0.13, 0.23)  # Table 5, average over heads: stutter, non-stutter pairs


@dataclass(frozen=True)
class Gap:
    """PaDIR T=4 B=5 against AR beam 5 on `sentences` sentences of `split`: all of it, or
    only its first sentences (evaluate.sentences; `subset` says so: no verdict then), with
    `whole` the command that scores all of it and `published` where those numbers are
    published ("" if nowhere)."""

    padir_bleu: float
    ar_bleu: float
    padir_label: str
    ar_label: str
    sentences: int
    split: str
    subset: str | None  # sections.subset_note: "the first 300 of the test split's 1000 ..."
    whole: str
    published: str

    @property
    def gap(self) -> float:
        """AR minus PaDIR BLEU (positive: PaDIR is behind)."""
        return self.ar_bleu - self.padir_bleu


@dataclass(frozen=True)
class Speed:
    """AR beam 5 / PaDIR T=4 B=5 batch-1 latency (text in and text out), each system in its
    fastest precision of the bench (`padir_precision`, `ar_precision`)."""

    padir_precision: str
    ar_precision: str
    median: float
    p99: float  # of the same two rows
    sentences: int
    threads: int
    ar1_median: float | None  # the same with the 1-layer-decoder AR; None: not benchmarked


@dataclass(frozen=True)
class Stutter:
    padir: float  # stuttered words per 100 words of PaDIR T=4 B=5's output
    ar: float
    reference: float  # adjacent repeats per 100 words of the references (the control)


@dataclass(frozen=True)
class Headline:
    """What the summary says; None: that stage did not run (or lacks the systems)."""

    quality: Gap | None
    speed: Speed | None
    stutter: Stutter | None
    attention: str | None
    stand_in: str | None  # why the examples stood in for the test set
    rerun: str | None  # with stand_in: how to rerun once the test set is there (rerun_hint)


def headline(
    cfg: ReproduceConfig,
    out: Path,
    scores: EvaluationScores | None,
    bench: BenchResult | None,
    attention: AttentionResult | None,
) -> Headline:
    """The headline of run folder `out` (of config `cfg`) from the results its stages wrote."""
    padir = scores.system(PADIR_SYSTEM) if scores else None
    ar = scores.system(AR_SYSTEM) if scores else None
    quality = stutter = None
    if scores and padir and ar:
        quality = Gap(
            padir_bleu=padir.quality.bleu,
            ar_bleu=ar.quality.bleu,
            padir_label=padir.label,
            ar_label=ar.label,
            sentences=scores.sentences,
            split=scores.split,
            subset=subset_note(scores),
            whole=whole_split_command(out),
            published=cfg.published,
        )
        stutter = Stutter(
            padir.quality.stutter_per_100_words,
            ar.quality.stutter_per_100_words,
            scores.reference_repeats_per_100_words,
        )
    stand_in = stand_in_reason(out)
    return Headline(
        quality=quality,
        speed=_speed(bench),
        stutter=stutter,
        attention=attention_sentence(attention),
        stand_in=stand_in,
        rerun=rerun_hint(cfg) if stand_in else None,
    )


def read_headline(cfg: ReproduceConfig, out: Path) -> Headline:
    """:func:`headline` of the results in run folder `out`."""
    return headline(
        cfg,
        out,
        EvaluationScores.read_if_present(out / "eval" / "scores.json"),
        BenchResult.read_if_present(out / "bench" / "bench.json"),
        AttentionResult.read_if_present(out / "attention" / "attention.json"),
    )


def whole_split_command(out: Path) -> str:
    """The command that reruns the run of folder `out` with its whole evaluation split."""
    return f"gmlm reproduce --preset {out}/reproduce.yaml --out {out}-full evaluate.sentences=0"


def _speed(bench: BenchResult | None) -> Speed | None:
    if bench is None:
        return None
    fastest = fastest_rows(bench)
    padir, ar, ar1 = (fastest.get(k) for k in (PADIR_BENCH, AR_BENCH, AR1_BENCH))
    if padir is None or ar is None:
        return None
    settings = bench.settings
    return Speed(
        padir.precision,
        ar.precision,
        speedup(ar.e2e.p50_ms, padir.e2e.p50_ms),
        speedup(ar.e2e.p99_ms, padir.e2e.p99_ms),
        settings.sentences,
        settings.threads,
        None if ar1 is None else speedup(ar1.e2e.p50_ms, padir.e2e.p50_ms),
    )


def attention_sentence(result: AttentionResult | None) -> str | None:
    """One sentence on Tables 4 and 5: do stutter pairs attend to the source more alike
    (cross-attention TV distance, average over heads), and to each other less?"""
    if result is None:
        return None
    stutter, other = (result.cross_attention[g] for g in GROUPS)
    if not stutter.pairs or not other.pairs:
        return (
            f"The attention analysis found {stutter.pairs} stutter and {other.pairs} other "
            "adjacent pairs: nothing to compare."
        )
    tv = [
        _mean(group.tv.avg, f"cross_attention.{g}.tv")
        for g, group in zip(GROUPS, (stutter, other), strict=True)
    ]
    weight = [
        _mean(result.self_attention[g].distance("next").avg, f"self_attention.{g}.next")
        for g in GROUPS
    ]
    alike = "more alike" if tv[0] < tv[1] else "no more alike"
    agrees = "as in the paper" if tv[0] < tv[1] else "unlike the paper"
    more = "less" if weight[0] < weight[1] else "no less"
    return (
        f"Adjacent positions that stutter (the same token twice, {stutter.pairs} pairs in "
        f"{result.sentences_with_stutter} of {result.sentences.decoded} raw outputs) attend to "
        f"the source {alike} than other adjacent pairs, {agrees}: cross-attention total "
        f"variation distance {tv[0]:.2f} vs {tv[1]:.2f} (average over heads; the paper "
        f"{PAPER_CROSS_TV[0]} vs {PAPER_CROSS_TV[1]}); and they attend to each other {more} "
        f"(self-attention weight {weight[0]:.3f} vs {weight[1]:.3f})."
    )


def _mean(value: MeanStd, where: str) -> float:
    """The mean of a group that has pairs (always there: the analysis writes one)."""
    if value.mean is None:
        raise GmlmError(
            f"attention/attention.json: {where}.avg.mean is null for a group with pairs; "
            "rerun the attention stage (--redo attention)"
        )
    return value.mean


def _quality_text(q: Gap) -> str:
    verdict = not_meaningful(q.ar_bleu)
    text = (
        f"{q.padir_label} {q.padir_bleu:.2f} BLEU vs {q.ar_label} {q.ar_bleu:.2f}: "
        f"gap {q.gap:+.2f} "
    )
    if q.subset:
        text += f"({q.subset}; no verdict on a subset)"
    else:
        text += f"({q.sentences} sentences of the {q.split} split)"
    return f"{text}; {verdict} (the models have not learned)" if verdict else text


def _whole_split_text(q: Gap) -> str:
    """How to score the whole split, when the run scored its first sentences only."""
    text = f"`evaluate.sentences=0` scores the whole {q.split} split: `{q.whole}`"
    return f"{text}; compare {q.published}" if q.published else text


def _speed_text(s: Speed, quality: Gap | None) -> str:
    few = too_few_for_p99(s.sentences)
    text = (
        f"PaDIR T=4 B=5 is {s.median:.2f}x as fast as AR beam 5 at the median"
        + ("" if few else f" and {s.p99:.2f}x at p99")
        + f" (batch 1, text in and text out, each in its fastest precision: PaDIR "
        f"{s.padir_precision}, AR {s.ar_precision}; {s.threads} threads, "
        + (f"{few})" if few else f"{s.sentences} sentences)")
    )
    if s.ar1_median is not None:
        text += f", and {s.ar1_median:.2f}x as fast as the 1-layer-decoder AR beam 5 at the median"
    verdict = not_meaningful(quality.ar_bleu) if quality else None
    return f"{text}; {verdict}" if verdict else text


def _stutter_text(s: Stutter) -> str:
    return (
        f"PaDIR T=4 B=5 {s.padir:.2f} stuttered words per 100 (AR beam 5 {s.ar:.2f}, "
        f"the references {s.reference:.2f})"
    )


# The Makefile targets that run the preset of their name on MULTI30K.
MAKE_TARGETS = ("demo", "demo-en-de")


def rerun_hint(cfg: ReproduceConfig) -> str:
    """What to do once the test set is there: the make target of `cfg`'s preset (`make demo`
    for a preset without one), and the command with the direction of its corpus."""
    target = cfg.preset if cfg.preset in MAKE_TARGETS else "demo"
    src, tgt = multi30k_pair(cfg.data.corpus)
    direction = "" if (src, tgt) == ("de", "en") else f":{src}-{tgt}"
    return (
        f"get test_2016_flickr.de.gz and test_2016_flickr.en.gz from {MULTI30K_SOURCE}, put "
        f"them in ../shared/data/multi30k (or any folder DIR) and run `make {target}` again "
        f"(`make {target} MULTI30K=DIR`; or `gmlm reproduce --preset {target} --out "
        f"runs/{target} data.corpus=multi30k:DIR{direction}`): the run then scores the test set "
        "and redoes the stages that need it"
    )


def _numbers(h: Headline) -> list[tuple[str, str, str | None]]:
    """The headline numbers present, in order: (label, text, a further line or None); the
    report's summary and the command's last lines render the same list."""
    parts: list[tuple[str, str, str | None]] = []
    if h.quality:
        more = _whole_split_text(h.quality) if h.quality.subset else None
        parts.append(("Quality", _quality_text(h.quality), more))
    if h.speed:
        parts.append(("Speed-up", _speed_text(h.speed, h.quality), None))
    if h.stutter:
        parts.append(("Stutter", _stutter_text(h.stutter), None))
    return parts


def summary_section(h: Headline) -> list[str]:
    """`## In 30 seconds`: the headline numbers as a short list, for REPORT.md's top."""
    lines = ["## In 30 seconds", ""]
    if h.stand_in:
        lines += [
            f"- **No test set here** ({h.stand_in}): translation quality (BLEU, chrF, "
            "stutter) and the attention and length analyses need the Multi30k test set; "
            f"{h.rerun}. The models translated gmlm's own example sentences instead "
            "(below), and the speed figures time those.",
        ]
    for label, text, more in _numbers(h):
        lines.append(f"- **{label}**: {text}.")
        if more:
            lines.append(f"  {more}.")
    if h.attention:
        lines.append(f"- **Attention**: {h.attention}")
    if len(lines) == 2:
        return []
    return [*lines, ""]


def final_lines(cfg: ReproduceConfig, out: Path) -> list[str]:
    """What `gmlm reproduce` prints last: where the report is and the headline numbers."""
    report = out / "REPORT.md"
    if not report.is_file():
        return []
    h = read_headline(cfg, out)
    lines = [f"report: {report}"]
    for label, text, more in _numbers(h):
        lines.append(f"{label.lower() + ':':<10}{text}")
        if more:
            lines.append(f"{'':<10}{more}")
    if h.stand_in:
        lines.append(f"quality not measured ({h.stand_in}): {h.rerun}")
    return lines
