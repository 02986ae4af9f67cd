"""Does AR search at fixed shapes (what a GPU runs) translate as the eager search does, and
what does it cost on this machine?

    python tools/ar_fixed_check.py --checkpoint checkpoints/multi30k-de-en/ar \
        --source ../shared/data/multi30k/val.de.gz --lines 200

Translates the first --lines lines with greedy and beam 5 search, eagerly and at fixed shapes
(gmlm.decoding.autoregressive_fixed), in batches of 32, and the first 40 at fixed shapes one
at a time; prints how many lines differ from the eager translation each way (0 expected; a
difference can only come from float rounding moving a near-tie) and the seconds each took
(fp32, the torch threads of the machine: set OMP_NUM_THREADS).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import gmlm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="an AR checkpoint folder")
    parser.add_argument("--source", required=True, help="source lines (.gz allowed)")
    parser.add_argument("--lines", type=int, default=200, help="lines to translate")
    args = parser.parse_args()
    opener = gzip.open if args.source.endswith(".gz") else open
    with opener(args.source, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for _, line in zip(range(args.lines), f, strict=False)]
    eager = gmlm.load(args.checkpoint, device="cpu")
    fixed = gmlm.load(args.checkpoint, device="cpu", fixed_shapes=True)
    if eager.kind != "ar":
        sys.exit(f"{args.checkpoint}: an AR checkpoint is needed, this one is {eager.kind}")
    for beam in (1, 5):
        start = time.perf_counter()
        expected = eager.translate(lines, beam=beam, batch_size=32)
        eager_s = time.perf_counter() - start
        start = time.perf_counter()
        batched = fixed.translate(lines, beam=beam, batch_size=32)
        fixed_s = time.perf_counter() - start
        single = fixed.translate(lines[:40], beam=beam, batch_size=1)
        differ = sum(a != b for a, b in zip(expected, batched, strict=True))
        differ_single = sum(a != b for a, b in zip(expected, single, strict=False))
        print(
            f"beam {beam}: {differ} of {len(lines)} lines differ at fixed shapes (batches of "
            f"32), {differ_single} of {len(single)} one at a time; eager {eager_s:.1f} s, "
            f"fixed {fixed_s:.1f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
