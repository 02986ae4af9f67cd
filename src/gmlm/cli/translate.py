"""`gmlm translate`: raw sentences in (stdin or --input), detokenized translations out.

Argument parsing and file handling only; the work is in `gmlm.translation.translator` (imported when the
command runs, so `gmlm --help` does not load torch).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from gmlm.data.textfiles import decode_utf8, read_lines, split_lines
from gmlm.errors import GmlmError
from gmlm.io import atomic_open, check_output_file


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "translate",
        help="translate raw sentences with a trained checkpoint",
        description="Reads UTF-8 sentences, one per line, from --input or stdin and writes one "
        "detokenized translation per line (an empty line stays empty), to --output (written "
        "atomically) or stdout. Decoding settings of the other model kind are an error.",
    )
    p.add_argument(
        "--checkpoint", type=Path, required=True, help="checkpoint folder (or a run folder)"
    )
    p.add_argument(
        "--input", type=Path, help="sentences, one per line (.gz allowed; default: stdin)"
    )
    p.add_argument("--output", type=Path, help="translations file (default: stdout)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default: 32)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 autocast; whether it is faster than fp32 depends on the CPU: measure "
        "with `gmlm bench --precision fp32,bf16`",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of PaDIR's initial random tokens; each line draws its own from (seed, line "
        "number), so its output does not depend on --batch-size or the other lines (default: 0)",
    )
    p.add_argument(
        "--over-length",
        choices=("error", "split", "report"),
        default="error",
        help="a line longer than the model's max_source_len: stop with an error naming it "
        "(default), split it at sentence punctuation, or report it and leave its output empty",
    )
    p.add_argument(
        "--length-penalty",
        type=float,
        help="GNMT length-penalty alpha for ranking hypotheses (default: 0.6 for beam search, "
        "0 for PaDIR candidates)",
    )
    ar = p.add_argument_group("autoregressive checkpoints")
    ar.add_argument("--beam", type=int, help="beam size (default: 1, greedy)")
    ar.add_argument("--max-len-a", type=float, help="length limit a * src_len + b (default a=1.5)")
    ar.add_argument("--max-len-b", type=int, help="length limit a * src_len + b (default b=10)")
    padir = p.add_argument_group("PaDIR checkpoints")
    padir.add_argument("--steps", type=int, help="refinement passes T (default: 4)")
    padir.add_argument("--length-beam", type=int, help="predicted lengths decoded (default: 5)")
    padir.add_argument(
        "--length-offsets",
        type=_offsets,
        help="extra candidates at predicted length + offset, e.g. --length-offsets=-1,1",
    )
    padir.add_argument("--random-starts", type=int, help="initial hypotheses per length (1)")
    padir.add_argument(
        "--stutter-remask",
        choices=("none", "previous", "initial"),
        help="replace a token equal to its left neighbour by the previous iteration's or the "
        "initial token (default: previous)",
    )
    padir.add_argument(
        "--remask",
        choices=("none", "constant", "linear"),
        help="Mask-Predict style reset of the least confident tokens (default: none)",
    )
    padir.add_argument("--remask-ratio", type=float, help="share reset by --remask constant")
    padir.add_argument(
        "--keep-initial-tokens",
        dest="drop_unchanged_initial",
        action="store_const",
        const=False,
        help="keep tokens still equal to their random initial token (dropped by default)",
    )
    padir.add_argument(
        "--no-dedup",
        dest="dedup_final",
        action="store_const",
        const=False,
        help="keep repeated adjacent tokens (dropped by default), e.g. to measure stutter",
    )
    padir.add_argument(
        "--length-weight",
        type=float,
        help="add this times the length predictor's log-probability to each candidate's "
        "score (default 0: token log-probabilities only, as in the paper)",
    )
    padir.add_argument(
        "--selection",
        choices=("sum", "mean", "changed"),
        help="how candidates are scored: mean token log-probability (default, chosen on "
        "validation data), their sum (the paper), or the sum over tokens changed from the "
        "random start (the authors' code)",
    )
    p.set_defaults(func=run)


def _offsets(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated integers, e.g. -1,1"
        ) from None


def read_input(path: Path | None) -> tuple[list[str], str]:
    """The input lines and a name for messages; stdin is split like `read_lines` splits a file."""
    if path is not None:
        return read_lines(path), str(path)
    stdin = Path("<stdin>")
    return split_lines(decode_utf8(sys.stdin.buffer.read(), stdin), stdin), str(stdin)


def _same_file(a: Path, b: Path) -> bool:
    return b.exists() and a.resolve() == b.resolve()


def run(args: argparse.Namespace) -> int:
    from gmlm.translation.translator import load

    if args.output is not None:
        check_output_file(args.output, "--output")  # not after the whole translation
    lines, origin = read_input(args.input)
    if args.input is not None and args.output is not None and _same_file(args.input, args.output):
        raise GmlmError(f"--output {args.output} is the input file; choose another path")
    translator = load(args.checkpoint, device=args.device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = translator.translate(
            lines,
            batch_size=args.batch_size,
            seed=args.seed,
            bf16=args.bf16,
            on_over_length=args.over_length,
            origin=origin,
            length_penalty=args.length_penalty,
            beam=args.beam,
            max_len_a=args.max_len_a,
            max_len_b=args.max_len_b,
            steps=args.steps,
            length_beam=args.length_beam,
            length_offsets=args.length_offsets,
            random_starts=args.random_starts,
            stutter_remask=args.stutter_remask,
            remask=args.remask,
            remask_ratio=args.remask_ratio,
            drop_unchanged_initial=args.drop_unchanged_initial,
            dedup_final=args.dedup_final,
            length_weight=args.length_weight,
            selection=args.selection,
        )
    for warning in caught:
        print(f"gmlm: warning: {warning.message}", file=sys.stderr)
    text = "".join(line + "\n" for line in outputs)
    if args.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with atomic_open(args.output, "w") as handle:
            handle.write(text)
    return 0
