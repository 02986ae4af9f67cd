"""`gmlm translate`: raw sentences in (stdin or --input), detokenized translations out.

Argument parsing and file handling only; the work is in `gmlm.translation` (imported when the
command runs, so `gmlm --help` does not load torch). The decoding flags are derived from the
fields of the options classes (`gmlm.cli.options`).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from gmlm.cli.flags import (
    add_batching,
    add_checkpoint,
    add_cuda_graphs,
    add_device,
    add_output,
    add_precision,
    add_seed,
)
from gmlm.cli.options import add_option_flags, option_overrides
from gmlm.data.textfiles import decode_utf8, read_lines, split_lines
from gmlm.decoding.options import (
    MAX_TOKENS_DEFAULT,
    MAX_TOKENS_WHY,
    RefinementOptions,
    SearchOptions,
)
from gmlm.io import atomic_open, check_output_file

# Who each decoding options class serves: the titles of the --help groups of their flags.
DECODING = {"autoregressive checkpoints": SearchOptions, "PaDIR checkpoints": RefinementOptions}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "translate",
        help="translate raw sentences with a trained checkpoint",
        description="Reads UTF-8 sentences, one per line, from --input or stdin and writes one "
        "detokenized translation per line (an empty line stays empty), to --output (written "
        "atomically) or stdout. Decoding settings of the other model kind are an error. A "
        "checkpoint may carry its own decoding defaults, chosen on validation data (its "
        "decoding.json, reported on stderr); the flags below override them.",
    )
    add_checkpoint(p, "checkpoint folder (or a run folder)")
    p.add_argument(
        "--input", type=Path, help="sentences, one per line (.gz allowed; default: stdin)"
    )
    add_output(p, "translations file (default: stdout)")
    add_batching(p, MAX_TOKENS_DEFAULT, MAX_TOKENS_WHY)
    add_device(p)
    add_cuda_graphs(
        p,
        "- it pays where shapes repeat, e.g. one sentence at a time "
        "(--batch-size 1; on an H100 2.5-3.3x faster than eager once warm, docs/RESULTS.md), not "
        "on a short file whose batches each meet new shapes",
    )
    add_precision(
        p,
        "fp32, bf16 weights and activations, or int8 dynamic quantisation of the Linear "
        "layers (CPU only); which is faster depends on the CPU: measure with `gmlm bench "
        "--precision fp32,bf16,int8`",
    )
    add_seed(
        p,
        "seed of PaDIR's initial random tokens; each line draws its own from (seed, line "
        "number), so its output does not depend on --batch-size or the other lines",
    )
    p.add_argument(
        "--over-length",
        choices=("error", "split", "report"),
        default="error",
        help="a line longer than the model's max_source_len: stop with an error naming it "
        "(default), translate it sentence by sentence (a sentence still too long cut at clause "
        "punctuation, then between words; no text is left out), or report it and leave its "
        "output empty",
    )
    p.add_argument(
        "--timing",
        action="store_true",
        help="report on stderr the seconds the translation took (model loading excluded), "
        "sentences per second and, for PaDIR, the padded share of its decoder passes' "
        "row-positions",
    )
    add_option_flags(p, DECODING)
    p.set_defaults(func=run)


def read_input(path: Path | None) -> tuple[list[str], str]:
    """The input lines and a name for messages; stdin is split like `read_lines` splits a file."""
    if path is not None:
        return read_lines(path), str(path)
    stdin = Path("<stdin>")
    return split_lines(decode_utf8(sys.stdin.buffer.read(), stdin), stdin), str(stdin)


def run(args: argparse.Namespace) -> int:
    from gmlm.translation.translator import batch_limits, load

    if args.output is not None:  # not after the whole translation
        inputs = {"--input": args.input, "--checkpoint": args.checkpoint}
        check_output_file(args.output, "--output", inputs=inputs)
    lines, origin = read_input(args.input)
    translator = load(args.checkpoint, device=args.device, cuda_graphs=args.cuda_graphs)
    if translator.defaults:
        shown = " ".join(f"{k}={v}" for k, v in translator.defaults.items())
        print(f"gmlm: the checkpoint's decoding defaults (decoding.json): {shown}", file=sys.stderr)
    batch_size, max_tokens = batch_limits(args.batch_size, args.max_tokens)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = translator.translate(
            lines,
            batch_size=batch_size,
            max_tokens=max_tokens,
            seed=args.seed,
            precision=args.precision,
            on_over_length=args.over_length,
            origin=origin,
            **option_overrides(args, DECODING.values()),
        )
    seconds = time.perf_counter() - start
    for warning in caught:
        print(f"gmlm: warning: {warning.message}", file=sys.stderr)
    if args.timing:
        rate = f"{len(lines) / seconds:.2f} sentences/s" if seconds > 0 else "instant"
        padding = translator.padding
        padded = (
            f"; padded share of PaDIR's row-positions {100 * padding.padded_share:.1f}% "
            f"({padding.computed - padding.content} of {padding.computed})"
            if padding.computed
            else ""
        )
        limits = [f"max tokens {max_tokens}"] if max_tokens else []
        limits += [f"batch size {batch_size}"] if batch_size else []
        print(
            f"gmlm: translated {len(lines)} lines in {seconds:.2f} s ({rate}, "
            f"{', '.join(limits)}, {args.precision}){padded}",
            file=sys.stderr,
        )
    text = "".join(line + "\n" for line in outputs)
    if args.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with atomic_open(args.output, "w") as handle:
            handle.write(text)
    return 0
