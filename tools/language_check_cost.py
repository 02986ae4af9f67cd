"""The cost of the input language check (gmlm.translation.language_check) per line.

Checks N lines against a source language, 5 rounds, and prints the fastest round's
microseconds per line (the identifier's model load, once per process, reported apart). The
lines: --input FILE (.gz allowed; e.g. a Multi30k test file), else the shipped examples
(src/gmlm/reproduce/examples.de and .en, German and English alternating, so that half of them
are flagged against either language), repeated to N. Run from the repository root:

    .venv/bin/python tools/language_check_cost.py [--lines 2000] [--source de] [--input FILE]
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from gmlm.data.textfiles import read_lines
from gmlm.translation.language_check import flag_lines, identifier

EXAMPLES = Path(__file__).resolve().parents[1] / "src" / "gmlm" / "reproduce"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=2000, help="lines checked (default 2000)")
    parser.add_argument("--source", default="de", help="the model's source language (de)")
    parser.add_argument("--input", type=Path, help="lines to check (default: the examples)")
    args = parser.parse_args()
    if args.input is not None:
        pool = read_lines(args.input)
    else:
        de, en = (read_lines(EXAMPLES / f"examples.{side}") for side in ("de", "en"))
        pool = [line for pair in zip(de, en, strict=True) for line in pair]
    lines = list(itertools.islice(itertools.cycle(pool), args.lines))
    start = time.perf_counter()
    identifier(args.source)
    loaded = time.perf_counter() - start
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        flags = flag_lines(lines, args.source)
        rounds.append(time.perf_counter() - start)
    best = min(rounds)
    print(
        f"{1e6 * best / len(lines):.1f} us per line ({len(lines)} lines, source {args.source}, "
        f"{len(flags)} flagged, fastest of 5 rounds); identifier loaded in {loaded:.2f} s"
    )


if __name__ == "__main__":
    main()
