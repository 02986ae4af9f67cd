"""`gmlm analyze attention|length|ablation|compare|calibrate|table1`: argument parsing only; the
work is in gmlm.analysis (imported when the command runs, so `gmlm --help` does not load torch).
The decoding flags are those of `gmlm translate` for PaDIR checkpoints, derived from
RefinementOptions (`gmlm.cli.options`); `compare` has those of both kinds."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gmlm.analysis.settings import (
    AblationSettings,
    AnalysisSettings,
    CalibrationSettings,
    ComparisonSettings,
    LengthSettings,
    Table1Settings,
)
from gmlm.cli.flags import (
    OUTPUT_FILE_RULE,
    add_checkpoint,
    add_device,
    add_json,
    add_no_progress,
    add_output,
    add_precision,
    add_seed,
)
from gmlm.cli.options import add_option_flags, option_overrides, settings_from_args
from gmlm.cli.translate import DECODING as TRANSLATE_DECODING
from gmlm.decoding.options import (
    CALIBRATION_GRIDS,
    FLOAT_PRECISIONS,
    OPTIONS,
    RefinementOptions,
)
from gmlm.errors import GmlmError
from gmlm.io import check_output_file
from gmlm.records import Record

R = TypeVar("R", bound=Record)

DECODING = {"PaDIR decoding (as gmlm translate)": RefinementOptions}


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "analyze",
        help="analyses of trained models (attention of stutter pairs, length prediction, "
        "decoding ablation, length calibration, the paper's Table 1 on Multi30k)",
        description="Analyses of trained checkpoints, as in Section 3.4 of the paper.",
    )
    analyze_sub = parser.add_subparsers(dest="analyze_command", metavar="SUBCOMMAND")
    analyze_sub.required = True
    add_attention_parser(analyze_sub)
    add_length_parser(analyze_sub)
    add_ablation_parser(analyze_sub)
    add_compare_parser(analyze_sub)
    add_calibrate_parser(analyze_sub)
    add_table1_parser(analyze_sub)


def add_attention_parser(sub: argparse._SubParsersAction) -> None:
    """`gmlm analyze attention`: attention of stutter pairs (Tables 4, 5)."""
    p = sub.add_parser(
        "attention",
        help="self- and cross-attention of stutter vs other adjacent pairs (Tables 4, 5)",
        description="Decodes a split's sources with a PaDIR checkpoint and compares the last "
        "decoder layer's attention (final pass, chosen candidate) of adjacent output positions "
        "holding the same token (stutter pairs, counted before the final dedup) with the other "
        "adjacent pairs: self-attention weights between the two positions and top-k "
        "membership (Table 4), total variation and cosine distances of their source "
        "attention and top-k overlap (Table 5); min / avg / max over heads, mean +- std over "
        "pairs. Prints Markdown tables with the paper's cells where known (n/a otherwise). "
        "Stutter remasking acts between passes only, so the final pass's stutters are "
        "observable with any --stutter-remask.",
    )
    common_arguments(p, AnalysisSettings)
    # The final filters never touch the raw hypotheses analysed.
    add_option_flags(p, DECODING, exclude=("keep_initial_tokens", "dedup", "dedup_words"))
    p.set_defaults(func=run_attention)


def add_length_parser(sub: argparse._SubParsersAction) -> None:
    """`gmlm analyze length`: length prediction, and decoding with the reference length."""
    p = sub.add_parser(
        "length",
        help="length prediction accuracy and decoding with the reference length (oracle)",
        description="Compares a PaDIR checkpoint's predicted target lengths with the "
        "references' (top-1 exact / within 1 / within 2, errors, reference among the top B) "
        "and decodes the split with T passes and (a) the top-1 predicted length, (b) the top B "
        "lengths for each --length-weights selection weight, (c) the reference length: BLEU, "
        "chrF, length ratio and stutter rate of each, to tell how much BLEU the length "
        "predictor costs. Rows (a) and (b) equal `gmlm translate` with the same decoding "
        "flags and --length-beam 1 or B.",
    )
    common_arguments(p, LengthSettings)
    add_option_flags(p, DECODING, exclude=("length_score_weight",))  # --length-weights sets it
    p.set_defaults(func=run_length)


def add_ablation_parser(sub: argparse._SubParsersAction) -> None:
    """`gmlm analyze ablation`: decoding settings switched one at a time."""
    p = sub.add_parser(
        "ablation",
        help="PaDIR decoding settings switched one at a time, on validation data",
        description="Translates a split (default: valid) with a PaDIR checkpoint, first with "
        "the decoding flags given (default: those of gmlm translate), then once per --variant "
        "with that variant's settings changed, and scores every row: BLEU, its change against "
        "the first row with the p-value of sacrebleu's paired bootstrap (1,000 resamples), "
        "chrF, length ratio, stutter rate and seconds. Each row equals `gmlm translate` with "
        "those flags. Choose decoding settings this way on validation data, never on the "
        "test set.",
    )
    common_arguments(p, AblationSettings)
    add_option_flags(p, DECODING)
    p.set_defaults(func=run_ablation)


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    """`gmlm analyze compare`: checkpoints against the first, on validation data."""
    p = sub.add_parser(
        "compare",
        help="checkpoints against another on validation data (BLEU, paired bootstrap)",
        description="Translates a split (default: valid) with --checkpoint and with each "
        "--against checkpoint (PaDIR or autoregressive), each with its own decoding defaults "
        "(decoding.json) changed by the decoding flags of its kind, and scores every row: "
        "BLEU, its change against the first row with the p-value of sacrebleu's paired "
        "bootstrap (1,000 resamples), chrF, length ratio, stutter rate and seconds. Each row "
        "equals `gmlm translate` with those flags. Judge a retrained model this way before it "
        "replaces another: on validation data, never on the test set.",
        epilog="example: gmlm analyze compare --checkpoint checkpoints/multi30k-en-de/padir "
        "--against runs/seed1/padir --data runs/seed1/data",
    )
    add_checkpoint(p, "the checkpoint (or run folder) the others are compared with")
    p.add_argument("--data", type=Path, required=True, help="prepared dataset folder")
    add_option_flags(p, {"analysis": ComparisonSettings})
    add_option_flags(p, TRANSLATE_DECODING)
    add_precision(p, "fp32, or bf16 weights and activations", choices=FLOAT_PRECISIONS)
    add_seed(p, "seed of PaDIR's initial random tokens, each line its own as in `gmlm translate`")
    add_device(p)
    add_json(p, "print one JSON object instead of a table")
    add_output(p, "also write the JSON result to this file")
    p.set_defaults(func=run_compare)


def add_calibrate_parser(sub: argparse._SubParsersAction) -> None:
    """`gmlm analyze calibrate`: choose a checkpoint's length setting."""
    p = sub.add_parser(
        "calibrate",
        help="choose a checkpoint's length setting on validation data and record it",
        description="Decodes a split (default: valid) with a checkpoint once per --values "
        "entry of one decoding --setting (PaDIR: length_shift, added to the predicted "
        "lengths; AR: length_penalty of beam search), every other setting at its default "
        "(plus --beam for AR), and scores each with SacreBLEU. The best value is kept only if "
        "it beats, by more than --min-gain BLEU, the value the checkpoint decodes with now "
        "(its decoding.json's, else the default; both are in the grid); it is then written "
        "to the checkpoint's decoding.json, which `gmlm translate`, `gmlm bench` and the "
        "analyses use as the checkpoint's decoding default. An earlier choice is never "
        "removed silently: the output says whether decoding.json was recorded, replaced, "
        "kept or left without a choice. Choose on validation data, never on the test set.",
    )
    add_checkpoint(p, "checkpoint folder (or run folder) to calibrate")
    p.add_argument("--data", type=Path, required=True, help="prepared dataset folder")
    add_option_flags(p, {"calibration": CalibrationSettings})
    p.add_argument(
        "--setting",
        help="the decoding setting to choose (default: "
        + ", ".join(f"{name} for {kind}" for kind, (name, _) in CALIBRATION_GRIDS.items())
        + " checkpoints)",
    )
    p.add_argument(
        "--values",
        type=number_list,
        help="comma-separated values to try, with = before a leading minus (--values=-1,0,1); "
        "the default value is added (default: "
        + "; ".join(
            f"{name}: {','.join(f'{v:g}' for v in values)}"
            for name, values in CALIBRATION_GRIDS.values()
        )
        + ")",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="score the values but leave decoding.json alone"
    )
    add_device(p)
    add_json(p, "print one JSON object instead of a table")
    add_output(p, "also write the JSON result to this file")
    add_no_progress(p)
    p.set_defaults(func=run_calibrate)


def add_table1_parser(sub: argparse._SubParsersAction) -> None:
    """`gmlm analyze table1`: the paper's Table 1 on Multi30k."""
    p = sub.add_parser(
        "table1",
        help="the paper's Table 1 on the Multi30k test set: AR beam 5, PaDIR T=4 and T=10 "
        "(B=5), BLEU and chrF of each direction",
        description="Translates the Multi30k test set (test_2016_flickr) of each --direction "
        "with the paper's Table 1 rows: the direction's ar checkpoint with beam 5, its padir "
        "checkpoint with T=4 and T=10 refinement passes over B=5 predicted lengths, each over "
        "its checkpoint's decoding defaults (decoding.json), as gmlm translate decodes. Scores "
        "every row with SacreBLEU's BLEU and chrF (the scores gmlm evaluate gives) and prints "
        "a Markdown table, a column group per direction beside the paper's BLEU on WMT for "
        "scale, with the signatures, every row's decoding, the number of sentences and the "
        "command that makes it again; a line per system on stderr. Every direction, "
        "checkpoint and test file is checked before the first translation: a checkpoint "
        "whose training data (named by its config.yaml, where it is on this machine) is of "
        "another language pair than the direction's name is an error.",
    )
    add_option_flags(p, {"table1": Table1Settings})
    add_device(p)
    add_output(p, "also write the JSON result to this file")
    p.add_argument(
        "--markdown",
        type=Path,
        help=f"also write the Markdown table and its notes to this file; {OUTPUT_FILE_RULE}",
    )
    p.set_defaults(func=run_table1)


def common_arguments(p: argparse.ArgumentParser, settings: type[AnalysisSettings]) -> None:
    """The analysis's own settings (`settings`, a class of gmlm.analysis.settings), and the
    flags of every analysis."""
    add_checkpoint(p, "PaDIR checkpoint folder (or run folder)")
    p.add_argument("--data", type=Path, required=True, help="prepared dataset folder")
    add_option_flags(p, {"analysis": settings})
    p.set_defaults(settings=settings)
    add_precision(p, "fp32, or bf16 weights and activations", choices=FLOAT_PRECISIONS)
    add_seed(p, "seed of the initial random tokens, each line its own as in `gmlm translate`")
    add_device(p)
    add_json(p, "print one JSON object instead of tables")
    add_output(p, "also write the JSON result to this file", old="--out")
    add_no_progress(p)


def check_output(args: argparse.Namespace) -> None:
    """Refuse a bad --output now, not after the whole analysis (gmlm.io.check_output_file)."""
    if args.output is not None:
        inputs = {"--checkpoint": args.checkpoint, "--data": args.data}
        check_output_file(args.output, "--output", inputs=inputs)


def run_attention(args: argparse.Namespace) -> int:
    from gmlm.analysis import attention_analysis, render_markdown

    check_output(args)
    return report(args, attention_analysis(**common_settings(args)[1]), render_markdown)


def run_length(args: argparse.Namespace) -> int:
    from gmlm.analysis.length import length_analysis, render_length_markdown

    check_output(args)
    settings, common = common_settings(args)
    assert isinstance(settings, LengthSettings)
    return report(
        args,
        length_analysis(**common, length_weights=settings.length_weights),
        render_length_markdown,
    )


def run_ablation(args: argparse.Namespace) -> int:
    from gmlm.analysis.ablation import decoding_ablation, render_ablation_markdown

    check_output(args)
    settings, common = common_settings(args)
    assert isinstance(settings, AblationSettings)
    return report(
        args,
        decoding_ablation(**common, variants=settings.variants),
        render_ablation_markdown,
    )


def run_compare(args: argparse.Namespace) -> int:
    from gmlm.analysis.comparison import compare_checkpoints, render_comparison_markdown

    settings = settings_from_args(ComparisonSettings, args)
    settings.validate()
    if args.output is not None:
        inputs = {"--checkpoint": args.checkpoint, "--data": args.data}
        inputs.update({f"--against {path}": Path(path) for path in settings.against})
        check_output_file(args.output, "--output", inputs=inputs)
    decoding = {kind: option_overrides(args, [options]) for kind, options in OPTIONS.items()}
    result = compare_checkpoints(
        [args.checkpoint, *settings.against],
        args.data,
        settings.split,
        sentences=settings.sentences or None,
        decoding=decoding,
        batch_size=settings.batch_size,
        bf16=args.precision == "bf16",
        seed=args.seed,
        device=args.device,
    )
    return report(args, result, render_comparison_markdown)


def number_list(text: str) -> tuple[float, ...]:
    """Comma-separated numbers, each an int where it is written as one (1, -2) else a float."""
    try:
        return tuple(
            int(t) if t.strip().lstrip("-").isdigit() else float(t) for t in text.split(",")
        )
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated numbers") from None


def run_calibrate(args: argparse.Namespace) -> int:
    from gmlm.analysis.calibration import calibrate, render_calibration_markdown
    from gmlm.checkpoint.config import read_checkpoint_config
    from gmlm.checkpoint.loading import resolve_checkpoint

    check_output(args)
    settings = settings_from_args(CalibrationSettings, args)
    settings.validate()
    kind = read_checkpoint_config(resolve_checkpoint(args.checkpoint)).kind
    setting, values = CALIBRATION_GRIDS[kind]
    if args.setting not in (None, setting):
        if args.values is None:
            raise GmlmError(f"--setting {args.setting}: give the values to try with --values")
        setting = args.setting
    result = calibrate(
        args.checkpoint,
        args.data,
        settings.split,
        setting=setting,
        values=values if args.values is None else args.values,
        decoding={"beam": settings.ar_beam} if kind == "ar" else {},
        min_gain=settings.min_gain,
        sentences=settings.sentences or None,
        batch_size=settings.batch_size,
        device=args.device,
        progress=not args.no_progress,
        write=not args.dry_run,
    )
    return report(args, result, render_calibration_markdown)


def run_table1(args: argparse.Namespace) -> int:
    from gmlm.analysis.table1 import check_outputs, render_table1_markdown, table1, write_outputs

    settings = settings_from_args(Table1Settings, args)
    settings.validate()
    check_outputs(settings, args.output, args.markdown)
    result = table1(
        settings, device=args.device, log=lambda line: print(line, file=sys.stderr, flush=True)
    )
    write_outputs(result, args.output, args.markdown)
    print(render_table1_markdown(result).rstrip("\n"))
    return 0


def common_settings(args: argparse.Namespace) -> tuple[AnalysisSettings, dict[str, Any]]:
    """The analysis's settings (checked), and the keyword arguments of `common_arguments` and
    the decoding flags, as the analyses name them. The flags given are overrides of the
    checkpoint's decoding defaults (its decoding.json over the options' defaults), as in
    `gmlm translate`: not an options object, which would replace those defaults."""
    settings = settings_from_args(args.settings, args)
    settings.validate()
    return settings, {
        **option_overrides(args, DECODING.values()),
        "checkpoint": args.checkpoint,
        "data": args.data,
        "split": settings.split,
        "sentences": settings.sentences or None,
        "batch_size": settings.batch_size,
        "bf16": args.precision == "bf16",
        "seed": args.seed,
        "device": args.device,
        "progress": not args.no_progress,
    }


def report(args: argparse.Namespace, result: R, render: Callable[[R], str]) -> int:
    if args.output is not None:
        result.write(args.output)
    print(json.dumps(result.to_json()) if args.json else render(result).rstrip("\n"))
    return 0
