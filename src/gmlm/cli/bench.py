"""`gmlm bench`: latency and throughput of PaDIR and AR decoding in one run.

Argument parsing only; the work is in `gmlm.bench` (imported when the command runs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gmlm.bench.settings import SWEPT, BenchSettings
from gmlm.cli.flags import OUTPUT_FILE_RULE, add_cuda_graphs, add_device, add_json, add_output
from gmlm.cli.options import add_option_flags, option_overrides, settings_from_args
from gmlm.decoding.options import RefinementOptions
from gmlm.errors import GmlmError

DESCRIPTION = """\
Times every system on the same sentences in one process: PaDIR with T = 1, 2, 4, 10 passes
and B = 1, 5 predicted lengths, and the AR model(s) greedy and with beam 5 on the key/value
cache (optional: --teacher, the AR teacher trained on the raw data, and --ar1, a
deep-encoder / 1-layer-decoder AR, skipped with a note when not given). With --ctranslate2,
--ar (and --ar1, when given) converted to CTranslate2 as well, greedy and beam 5 by gmlm's
decoding rules, in fp32 and int8 (no bf16: CTranslate2 has none on a CPU), timed in worker
processes of their own (CTranslate2's OpenMP and torch's slow each other down in one
process), each on the fastest of its GEMM backends (Intel MKL on or off) and thread counts
(--threads or 1), compared on 5 sentences first.

For each precision: batch-1 latency per sentence (median, p90, p99 after a warm-up), both
model-only (ids in, ids out) and end-to-end (raw text in, detokenized text out; model loading
excluded and reported separately), and throughput (sentences/s, output tokens/s) at each
batch size, and the BLEU of each row's end-to-end translations of the timed sentences
against the split's references, so a speed is never shown without the quality it buys
(a check of the timed setting on those sentences, not the whole split's published score).
Systems are interleaved sentence by sentence and batch by batch so background
load hits all alike. Prints the settings, a table, the speed-up of every PaDIR setting over
every AR system (median and p99 ratios), the same median ratios within each third of the
sentences by source length (does PaDIR's lead grow with the length?), which system to pick
for which job (the best BLEU, and the lowest latency and the highest throughput within 1 BLEU
of it, with the Pareto fronts), and one JSON line last. --plots draws the trade-offs: BLEU
against batch-1 median latency and against throughput, every system and precision a point;
--replot re-renders an existing bench.json (tables, choices, plots, Markdown) without timing.

Cost: time grows linearly with --sentences, the number of systems and the number of
precisions. Measured: `make speed` (8 systems per precision, 200 sentences, batch sizes 1
and 8, fp32 and int8, small models) took 12.5 minutes on 2 idle AMD EPYC cores (the
defaults, 100 sentences, 10 systems, batch sizes up to 64, were not timed). bf16 on a CPU
without bf16 units (AVX2 only) is emulated: 1.3-4x slower than fp32 per sentence there.
Raise --sentences for steadier p99s when there is time."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="latency and throughput of PaDIR vs autoregressive decoding",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--ar", type=Path, help="AR checkpoint or run folder (required unless --replot)")
    p.add_argument(
        "--padir", type=Path, help="PaDIR checkpoint or run folder (required unless --replot)"
    )
    p.add_argument(
        "--teacher",
        type=Path,
        help="a second AR checkpoint timed alike, e.g. the teacher trained on the raw data "
        "(optional)",
    )
    p.add_argument(
        "--ar1", type=Path, help="AR with a 1-layer decoder (optional; skipped when absent)"
    )
    p.add_argument(
        "--data", type=Path, help="prepared dataset, source text (required unless --replot)"
    )
    add_option_flags(p, {"bench": BenchSettings})
    add_option_flags(
        p.add_argument_group(
            "PaDIR decoding of every PaDIR system (as gmlm translate; default: the "
            "checkpoint's, e.g. --prune-after 0 times unpruned decoding)"
        ),
        {"PaDIR decoding": RefinementOptions},
        exclude=SWEPT,
    )
    add_device(p, default="cpu")
    add_cuda_graphs(
        p,
        "for every torch system, captured during the warm-up (every timed sentence on a "
        "GPU), so that the timed pass only replays graphs; batch size 1 only (--batch-sizes 1)",
    )
    add_output(p, "also write the result JSON to this file", old="--json-out")
    p.add_argument(
        "--markdown",
        type=Path,
        help="also write the report as Markdown to this file, as REPORT.md shows it (which "
        f"system for which job, the --plots, the settings and tables); {OUTPUT_FILE_RULE}",
    )
    p.add_argument(
        "--plots",
        type=Path,
        metavar="DIR",
        help="also draw BLEU against batch-1 median latency and against throughput (the best "
        "of the batch sizes), every system and precision a labelled point and the Pareto "
        f"front a step line, as DIR/{PLOT_FILES[0]} and DIR/{PLOT_FILES[1]} (rows with a "
        "BLEU only), each written atomically and replaced if it exists, but never an input "
        "of the command nor a file inside a checkpoint or training run folder",
    )
    p.add_argument(
        "--replot",
        type=Path,
        metavar="BENCH_JSON",
        help="time nothing: re-render the bench.json of an earlier run (its --output) as "
        "tables, --markdown and --plots (instead of --ar, --padir and --data)",
    )
    add_json(p, "print only the JSON line, not the settings and tables")
    p.set_defaults(func=run)


# As in gmlm.bench.plots (not imported here: `gmlm --help` must not load matplotlib).
PLOT_FILES = ("bleu_vs_latency.png", "bleu_vs_throughput.png")


def run(args: argparse.Namespace) -> int:
    from gmlm.bench import format_report, json_line, run_bench
    from gmlm.bench.outputs import check_outputs, read_result, write_outputs

    inputs = {"--ar": args.ar, "--padir": args.padir, "--teacher": args.teacher}
    inputs.update({"--ar1": args.ar1, "--data": args.data})
    if args.replot is not None:
        given = [flag for flag, path in {**inputs, "--output": args.output}.items() if path]
        if given:
            raise GmlmError(
                f"--replot re-renders {args.replot} without timing anything: drop "
                f"{', '.join(given)}"
            )
        check_outputs(
            output=None, markdown=args.markdown, plots=args.plots, inputs={"--replot": args.replot}
        )
        result = read_result(args.replot, "--replot")
    else:
        missing = [flag for flag in ("--ar", "--padir", "--data") if inputs[flag] is None]
        if missing:
            raise GmlmError(
                f"gmlm bench needs {', '.join(missing)} (or --replot BENCH_JSON to re-render "
                "an earlier run without timing)"
            )
        check_outputs(  # before the minutes of timing
            output=args.output, markdown=args.markdown, plots=args.plots, inputs=inputs
        )
        result = run_bench(
            args.ar,
            args.padir,
            args.data,
            settings_from_args(BenchSettings, args),
            teacher=args.teacher,
            ar1=args.ar1,
            padir_options={
                name: value
                for name, value in option_overrides(args, [RefinementOptions]).items()
                if name not in SWEPT
            },
            device=args.device,
            cuda_graphs=args.cuda_graphs,
            json_out=args.output,
            log=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
    write_outputs(result, markdown=args.markdown, plots=args.plots)
    if not args.json:
        print(format_report(result))
    print(json_line(result), flush=True)
    return 0
