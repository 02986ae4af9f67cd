"""`gmlm evaluate`: SacreBLEU, chrF, the stutter rate and repeated n-grams of a hypothesis
file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gmlm.data.textfiles import read_lines
from gmlm.errors import GmlmError
from gmlm.evaluation.bleu import corpus_scores, default_tokenizer, language_code
from gmlm.evaluation.results import Evaluation, ScoreSummary
from gmlm.evaluation.stutter import repeat_lines, stutter_report


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="SacreBLEU, chrF, stutter rate and repeated n-grams of a hypothesis file",
        description="Scores detokenized, cased hypotheses against one reference per line, as "
        "the `sacrebleu` command does (same scores and signatures), and measures word-level "
        "stutter: adjacent repeated words in excess of those in the reference; and immediately "
        "repeated n-grams (n = 1..4: 'in a field in a field') in the hypotheses and, as a "
        "control, the references: the share of lines with one, the rate per 100 words, and the "
        "lines with a repeated phrase of 2-4 words.",
    )
    p.add_argument("--hyp", type=Path, required=True, help="hypotheses, one per line (UTF-8)")
    p.add_argument("--ref", type=Path, required=True, help="references, line-aligned with --hyp")
    p.add_argument("--src", type=Path, help="sources (optional; only checked for line count)")
    p.add_argument(
        "--target-lang",
        help="target language code, as de or zh-CN (Chinese, zh in any case or region, or zho, "
        "selects the zh tokenizer)",
    )
    p.add_argument(
        "--tokenize",
        choices=("13a", "zh", "intl", "char", "none"),
        help="BLEU tokenizer (default: 13a, or zh for --target-lang zh)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.target_lang is not None:  # checked first, also where --tokenize makes it moot
        language_code(args.target_lang)
    tokenize = args.tokenize or default_tokenizer(args.target_lang)
    hyps = read_lines(args.hyp)
    refs = read_lines(args.ref)
    if len(hyps) != len(refs):
        raise GmlmError(
            f"line counts differ: {args.hyp} has {len(hyps):,} lines, {args.ref} "
            f"has {len(refs):,}; hypotheses and references must be line-aligned"
        )
    if args.src is not None:
        srcs = read_lines(args.src)
        if len(srcs) != len(refs):
            raise GmlmError(
                f"line counts differ: {args.src} has {len(srcs):,} lines, "
                f"{args.ref} has {len(refs):,}"
            )
    if any(ref.strip() for ref in refs) and not any(hyp.strip() for hyp in hyps):
        print(
            f"gmlm: warning: every line of --hyp {args.hyp} is empty: the scores below are "
            "those of no translation; check how the hypotheses were made",
            file=sys.stderr,
        )
    scores = corpus_scores(hyps, refs, tokenize)
    stutter = stutter_report(hyps, refs, "zh" if tokenize == "zh" else "13a")
    if args.json:
        summaries = {
            name: ScoreSummary(score=s.score, signature=s.signature, length_ratio=s.length_ratio)
            for name, s in scores.items()
        }
        evaluation = Evaluation(
            hyp=str(args.hyp),
            ref=str(args.ref),
            bleu=summaries["bleu"],
            chrf=summaries["chrf"],
            stutter=stutter,
        )
        print(json.dumps(evaluation.to_json()))
        return 0
    for s in scores.values():
        print(f"{s.text}\n  signature: {s.signature}")
    print(
        f"stutter: {stutter.stutters} stutters in {stutter.sentences} sentences = "
        f"{stutter.stutters_per_100_words:.3f} per 100 words; "
        f"{100 * stutter.sentences_with_stutter:.2f}% of sentences"
    )
    print(
        f"  raw repeats per 100 words: hypothesis {stutter.hypothesis_repeats_per_100_words:.3f},"
        f" reference (control) {stutter.reference_repeats_per_100_words:.3f}"
    )
    print("\n".join(repeat_lines(stutter)))
    return 0
