"""The 30-second summary at the top of REPORT.md, and the last lines `gmlm reproduce` prints.

    from gmlm.reproduce.summary import read_headline, summary_section

    headline = read_headline(Path("runs/demo"))   # from the JSON files the stages wrote
    print("\\n".join(summary_section(headline)))

Three headline numbers, each read from a file of the run folder: the quality gap (PaDIR T=4
B=5 against AR beam 5, eval/scores.json), the batch-1 speed-up (median and p99 of AR beam 5
over PaDIR T=4 B=5, text in and text out, bench/bench.json) and PaDIR's stutter (per 100
words, eval/scores.json); then one sentence on the attention tables (attention/attention.json).
A comparison of models that have not learned says so instead of giving a verdict: below
`AR_BLEU_FLOOR` the AR reference system has not learned to translate (an untrained beam search
stops early, which also makes it look slow).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gmlm.reproduce.stages import EXAMPLES, MULTI30K_SOURCE, stand_in_reason

AR_BLEU_FLOOR = 5.0
"""Below this BLEU the AR reference system has not learned; comparisons with it mean nothing."""
PADIR_SYSTEM, AR_SYSTEM = "padir-T4-B5", "ar-beam5"  # eval/scores.json keys
PADIR_BENCH, AR_BENCH = "padir T=4 B=5", "ar beam5"  # bench/bench.json names
PAPER_CROSS_TV = (0.13, 0.23)  # Table 5, average over heads: stutter, non-stutter pairs


def not_meaningful(ar_bleu: float) -> str | None:
    """The verdict for a comparison with an AR system of `ar_bleu` that has not learned
    (below AR_BLEU_FLOOR), or None when the comparison means something."""
    if ar_bleu < AR_BLEU_FLOOR:
        return f"not meaningful: AR BLEU {ar_bleu:.2f}"
    return None


@dataclass(frozen=True)
class Quality:
    padir_bleu: float
    ar_bleu: float
    padir_label: str
    ar_label: str
    sentences: int
    split: str

    @property
    def gap(self) -> float:
        """AR minus PaDIR BLEU (positive: PaDIR is behind)."""
        return self.ar_bleu - self.padir_bleu


@dataclass(frozen=True)
class Speed:
    precision: str
    median: float  # AR / PaDIR batch-1 latency, text in and text out
    p99: float
    sentences: int
    threads: int


@dataclass(frozen=True)
class Stutter:
    padir: float  # stuttered words per 100 words of PaDIR T=4 B=5's output
    ar: float
    reference: float  # adjacent repeats per 100 words of the references (the control)


@dataclass(frozen=True)
class Headline:
    """What the summary says, read from the run folder; None: that stage did not run."""

    quality: Quality | None
    speed: Speed | None
    stutter: Stutter | None
    attention: str | None
    stand_in: str | None  # why the examples stood in for the test set


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def read_headline(out: Path) -> Headline:
    scores = _read(out / "eval" / "scores.json")
    rows = {r["system"]: r for r in (scores or {}).get("systems", [])}
    padir, ar = rows.get(PADIR_SYSTEM), rows.get(AR_SYSTEM)
    quality = stutter = None
    if padir and ar:
        quality = Quality(
            padir["bleu"],
            ar["bleu"],
            padir["label"],
            ar["label"],
            scores["sentences"],
            scores["split"],
        )
        stutter = Stutter(
            padir["stutter_per_100_words"],
            ar["stutter_per_100_words"],
            scores["reference_repeats_per_100_words"],
        )
    return Headline(
        quality=quality,
        speed=_speed(_read(out / "bench" / "bench.json")),
        stutter=stutter,
        attention=attention_sentence(_read(out / "attention" / "attention.json")),
        stand_in=stand_in_reason(out),
    )


def _speed(bench: dict[str, Any] | None) -> Speed | None:
    rows = [
        s
        for s in (bench or {}).get("speedups", [])
        if (s["padir"], s["ar"]) == (PADIR_BENCH, AR_BENCH)
    ]
    if not rows:
        return None
    row = next((s for s in rows if s["precision"] == "fp32"), rows[0])
    settings = bench["settings"] if bench else {}
    return Speed(
        row["precision"], row["e2e_p50"], row["e2e_p99"], settings["sentences"], settings["threads"]
    )


def attention_sentence(result: dict[str, Any] | None) -> str | None:
    """One sentence on Tables 4 and 5: do stutter pairs attend to the source more alike
    (cross-attention TV distance, average over heads), and to each other less?"""
    if result is None:
        return None
    cross, own = result["cross_attention"], result["self_attention"]
    if not cross["stutter"]["pairs"] or not cross["non_stutter"]["pairs"]:
        return (
            f"The attention analysis found {cross['stutter']['pairs']} stutter and "
            f"{cross['non_stutter']['pairs']} other adjacent pairs: nothing to compare."
        )
    tv = [cross[g]["tv"]["avg"]["mean"] for g in ("stutter", "non_stutter")]
    weight = [own[g]["next"]["avg"]["mean"] for g in ("stutter", "non_stutter")]
    alike = "more alike" if tv[0] < tv[1] else "no more alike"
    agrees = "as in the paper" if tv[0] < tv[1] else "unlike the paper"
    more = "less" if weight[0] < weight[1] else "no less"
    return (
        f"Adjacent positions that stutter (the same token twice, "
        f"{cross['stutter']['pairs']} pairs in {result['sentences_with_stutter']} of "
        f"{result['sentences']['decoded']} raw outputs) attend to the source {alike} than "
        f"other adjacent pairs, {agrees}: cross-attention total variation distance "
        f"{tv[0]:.2f} vs {tv[1]:.2f} (average over heads; the paper {PAPER_CROSS_TV[0]} vs "
        f"{PAPER_CROSS_TV[1]}); and they attend to each other {more} (self-attention weight "
        f"{weight[0]:.3f} vs {weight[1]:.3f})."
    )


def _quality_text(q: Quality) -> str:
    verdict = not_meaningful(q.ar_bleu)
    text = (
        f"{q.padir_label} {q.padir_bleu:.2f} BLEU vs {q.ar_label} {q.ar_bleu:.2f}: "
        f"gap {q.gap:+.2f} ({q.sentences} sentences of the {q.split} split)"
    )
    return f"{text}; {verdict} (the models have not learned)" if verdict else text


def _speed_text(s: Speed, quality: Quality | None) -> str:
    text = (
        f"PaDIR T=4 B=5 is {s.median:.2f}x as fast as AR beam 5 at the median and {s.p99:.2f}x "
        f"at p99 (batch 1, text in and text out, {s.precision}, {s.threads} threads, "
        f"{s.sentences} sentences)"
    )
    verdict = not_meaningful(quality.ar_bleu) if quality else None
    return f"{text}; {verdict}" if verdict else text


def _stutter_text(s: Stutter) -> str:
    return (
        f"PaDIR T=4 B=5 {s.padir:.2f} stuttered words per 100 (AR beam 5 {s.ar:.2f}, "
        f"the references {s.reference:.2f})"
    )


def rerun_hint() -> str:
    return (
        f"get test_2016_flickr.de.gz and test_2016_flickr.en.gz from {MULTI30K_SOURCE}, put "
        "them in ../shared/data/multi30k (or any folder DIR) and run `make demo` again "
        "(`make demo MULTI30K=DIR`; or `gmlm reproduce --preset demo --out runs/demo "
        "data.corpus=multi30k:DIR`): the run then scores the test set and redoes the stages "
        "that need it"
    )


def summary_section(h: Headline) -> list[str]:
    """`## In 30 seconds`: the headline numbers as a short list, for REPORT.md's top."""
    lines = ["## In 30 seconds", ""]
    if h.stand_in:
        lines += [
            f"- **No test set here** ({h.stand_in}): translation quality (BLEU, chrF, "
            "stutter) and the attention and length analyses need the Multi30k test set; "
            f"{rerun_hint()}. The models translated gmlm's own example sentences instead "
            "(below), and the speed figures time those.",
        ]
    if h.quality:
        lines.append(f"- **Quality**: {_quality_text(h.quality)}.")
    if h.speed:
        lines.append(f"- **Speed-up**: {_speed_text(h.speed, h.quality)}.")
    if h.stutter:
        lines.append(f"- **Stutter**: {_stutter_text(h.stutter)}.")
    if h.attention:
        lines.append(f"- **Attention**: {h.attention}")
    if len(lines) == 2:
        return []
    return [*lines, ""]


def final_lines(out: Path) -> list[str]:
    """What `gmlm reproduce` prints last: where the report is and the headline numbers."""
    report = out / "REPORT.md"
    if not report.is_file():
        return []
    h = read_headline(out)
    lines = [f"report: {report}"]
    if h.quality:
        lines.append(f"quality:  {_quality_text(h.quality)}")
    if h.speed:
        lines.append(f"speed-up: {_speed_text(h.speed, h.quality)}")
    if h.stutter:
        lines.append(f"stutter:  {_stutter_text(h.stutter)}")
    if h.stand_in:
        lines.append(f"quality not measured ({h.stand_in}): {rerun_hint()}")
    return lines


def extra_sections(out: Path) -> list[str]:
    """The example translations (when the examples stood in for the test set) and the length
    analysis, for REPORT.md."""
    lines: list[str] = []
    examples = _read(out / "eval" / "examples.json")
    if examples is not None:
        shown = [k for k in (AR_SYSTEM, PADIR_SYSTEM) if k in examples["translations"]]
        rows = [
            [source, *(examples["translations"][k][i] for k in shown)]
            for i, source in enumerate(examples["sources"])
        ]
        lines += [
            "## Example translations",
            "",
            f"gmlm's own example sentences ({EXAMPLES.name}.de, not a test set: no scores), "
            "translated by the checkpoints of this run; every system's output is in "
            "eval/examples.json.",
            "",
            _table(["German", *(examples["labels"][k] for k in shown)], rows),
            "",
        ]
    length = _read(out / "length" / "length.json")
    if length is not None:
        from gmlm.analysis.length import render_length_markdown

        lines += [
            "## Length prediction",
            "",
            "`gmlm analyze length`: how often PaDIR's length predictor finds the reference "
            "length, and the BLEU of decoding with the reference length (an oracle).",
            "",
            render_length_markdown(length).strip(),
            "",
        ]
    return lines


def _table(header: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows])
