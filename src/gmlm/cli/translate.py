"""`gmlm translate`: raw sentences in (stdin or --input), detokenized translations out.

Argument parsing and file handling only; the work is in `gmlm.translation` (imported when the
command runs, so `gmlm --help` does not load torch). The decoding flags are derived from the
fields of the options classes (`gmlm.cli.options`).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gmlm.cli.flags import (
    add_batching,
    add_checkpoint,
    add_cuda_graphs,
    add_device,
    add_no_progress,
    add_output,
    add_precision,
    add_seed,
)
from gmlm.cli.options import add_option_flags, option_overrides, settings_from_args
from gmlm.data.textfiles import decode_utf8, read_bounded, read_lines, split_lines
from gmlm.decoding.options import (
    MAX_TOKENS_DEFAULT,
    MAX_TOKENS_WHY,
    RefinementOptions,
    SearchOptions,
)
from gmlm.errors import GmlmError
from gmlm.io import STDIN, atomic_open, check_output_file
from gmlm.translation.language_settings import LanguageCheckSettings
from gmlm.translation.rescore_settings import RescoreSettings
from gmlm.translation.shard_settings import ShardSettings

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
        "decoding.json, reported on stderr); the flags below override them. Under torchrun "
        "(e.g. torchrun --nproc_per_node 4 -m gmlm translate ... --output OUT), the processes "
        "share the input in chunks of --chunk-lines, saved in OUT.chunks/ as they finish (run "
        "the same command again to resume); rank 0 writes OUT, the same as one process's. "
        "Each line is checked first: one with no letters, or of 3 words or more and "
        "confidently in another language than the checkpoint's source language, is named in "
        "a warning on stderr (or, with --strict, refuses the input); a checkpoint whose "
        "languages are not known (named on stderr) is not checked.",
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
        "- default: on on a GPU, where decoding runs at a few bucketed shapes (PaDIR: every "
        "candidate every pass; AR: a preallocated cache at a bucketed length), so a few graphs "
        "serve every batch",
        default=None,
    )
    add_precision(
        p,
        "fp32, bf16 weights and activations, or int8 dynamic quantisation of the Linear "
        "layers (CPU only); which is faster depends on the CPU: measure with `gmlm bench "
        "--precision fp32,bf16,int8`",
    )
    add_seed(
        p,
        "seed of PaDIR's initial random tokens; a line's are keyed by the seed and the line "
        "itself, so its output does not depend on --batch-size, its place in the file or "
        "the other lines (a repeated line translates alike)",
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
    add_no_progress(
        p,
        "no progress bar (by default one shows on stderr while translating, in one process, "
        "when stderr is a terminal)",
    )
    add_option_flags(p, DECODING)
    add_option_flags(p, {"rescoring PaDIR's candidates": RescoreSettings})
    add_option_flags(p, {"torchrun": ShardSettings})
    add_option_flags(p, {"input language check": LanguageCheckSettings})
    p.set_defaults(func=run)


def read_input(path: Path | None) -> tuple[list[str], str]:
    """The input lines and a name for messages; stdin is split like `read_lines` splits a file."""
    if path is not None:
        return read_lines(path), str(path)
    stdin = Path("<stdin>")
    return split_lines(decode_utf8(read_bounded(sys.stdin.buffer, stdin), stdin), stdin), str(stdin)


def run(args: argparse.Namespace) -> int:
    from gmlm.translation.batch_plan import batch_limits
    from gmlm.translation.sharded import under_torchrun

    if args.output is not None:  # not after the whole translation
        inputs = {"--input": args.input, "--checkpoint": args.checkpoint, "--rescore": args.rescore}
        inputs["standard input"] = STDIN if args.input is None else None
        check_output_file(args.output, "--output", inputs=inputs)
    elif under_torchrun():
        raise GmlmError(
            "under torchrun, give --output FILE: the processes save their chunks beside it "
            "(FILE.chunks/) and rank 0 writes it"
        )
    if args.rescore_weight is not None and args.rescore is None:
        raise GmlmError("--rescore-weight needs --rescore CHECKPOINT, the model it weighs")
    if args.rescore is not None and under_torchrun():
        raise GmlmError("--rescore runs in one process: run gmlm translate without torchrun")
    lines, origin = read_input(args.input)
    if not any(line.strip() for line in lines):
        _say(
            f"warning: {origin} holds no non-empty line, so there is nothing to translate "
            f"({len(lines)} empty output line(s)); give a file of sentences, one per line"
        )
    batch_size, max_tokens = batch_limits(args.batch_size, args.max_tokens)
    strict = settings_from_args(LanguageCheckSettings, args).strict
    translate_args = {
        "batch_size": batch_size,
        "max_tokens": max_tokens,
        "seed": args.seed,
        "precision": args.precision,
        "on_over_length": args.over_length,
        "check_language": "strict" if strict else "warn",
        **option_overrides(args, DECODING.values()),
    }
    limits = [f"max tokens {max_tokens}"] if max_tokens else []
    limits += [f"batch size {batch_size}"] if batch_size else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if under_torchrun():
            _run_sharded(args, lines, origin, translate_args, ", ".join(limits))
        else:
            _run_one(args, lines, origin, translate_args, ", ".join(limits))
    for warning in caught:
        print(f"gmlm: warning: {warning.message}", file=sys.stderr)
    return 0


def _say(message: str) -> None:
    print(f"gmlm: {message}", file=sys.stderr)


def _run_one(
    args: argparse.Namespace,
    lines: list[str],
    origin: str,
    translate_args: dict[str, Any],
    limits: str,
) -> None:
    """The whole input in this process, written at the end (stdout or --output)."""
    from gmlm.translation.translator import load

    rescoring = settings_from_args(RescoreSettings, args)
    rescore = rescoring.rescore
    # Rescoring decodes eagerly: CUDA graphs are off unless asked for (then an error).
    graphs = False if rescore is not None and args.cuda_graphs is None else args.cuda_graphs
    translator = load(args.checkpoint, device=args.device, cuda_graphs=graphs)
    _say(f"{args.checkpoint}: {translator.describe()}")
    if translator.defaults:
        shown = " ".join(f"{k}={v}" for k, v in translator.defaults.items())
        _say(f"the checkpoint's decoding defaults (decoding.json): {shown}")
    if rescore is not None:
        weight = rescoring.rescore_weight
        translator.rescore_with(load(rescore, device=args.device, cuda_graphs=graphs), weight)
        _say(f"candidates rescored by {rescore} (weight {weight})")
    start = time.perf_counter()
    with progress_bar(not args.no_progress and sys.stderr.isatty()) as progress:
        outputs = translator.translate(lines, origin=origin, progress=progress, **translate_args)
    seconds = time.perf_counter() - start
    if args.timing:
        padding = translator.padding
        _say_timing(len(lines), seconds, limits, args.precision, padding.content, padding.computed)
    text = "".join(line + "\n" for line in outputs)
    if args.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with atomic_open(args.output, "w") as handle:
            handle.write(text)


@contextlib.contextmanager
def progress_bar(shown: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback for `Translator.translate` that draws a bar of sentences on stderr
    from the first batch on (None when not `shown`); the bar is closed on the way out."""
    if not shown:
        yield None
        return
    from tqdm import tqdm

    bars: list[tqdm] = []

    def report(done: int, total: int) -> None:
        if not bars:
            bars.append(tqdm(total=total, desc="translate", unit="sent", dynamic_ncols=True))
        bars[0].update(done - bars[0].n)

    try:
        yield report
    finally:
        for bar in bars:
            bar.close()


def _run_sharded(
    args: argparse.Namespace,
    lines: list[str],
    origin: str,
    translate_args: dict[str, Any],
    limits: str,
) -> None:
    """This process's share of the input under torchrun; rank 0 writes --output."""
    from gmlm.translation.sharded import translate_file

    done = translate_file(
        args.checkpoint,
        lines,
        args.output,
        origin=origin,
        sharding=settings_from_args(ShardSettings, args),
        device=args.device,
        cuda_graphs=args.cuda_graphs,
        say=_say,
        **translate_args,
    )
    if done is not None and args.timing:
        _say_timing(
            done.lines,
            done.seconds,
            f"{limits}, {done.processes} processes, {done.lines - done.translated_now} lines "
            "resumed",
            args.precision,
            done.padding_content,
            done.padding_computed,
        )


def _say_timing(
    lines: int, seconds: float, limits: str, precision: str, content: int, computed: int
) -> None:
    rate = f"{lines / seconds:.2f} sentences/s" if seconds > 0 else "instant"
    padded = (
        f"; padded share of PaDIR's row-positions {100 * (1 - content / computed):.1f}% "
        f"({computed - content} of {computed})"
        if computed
        else ""
    )
    _say(f"translated {lines} lines in {seconds:.2f} s ({rate}, {limits}, {precision}){padded}")
