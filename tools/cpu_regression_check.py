"""Is the CPU decoding path of the working tree slower than an earlier commit's?

    python tools/cpu_regression_check.py --baseline 3cd9d47 \
        --source ../shared/data/multi30k/val.de.gz

Exports the baseline commit's src/ to a temporary folder (git archive), then times, alternately
with the baseline and the working tree (each in a fresh process, --rounds times, each first in
every other round), the shipped German-English AR beam 5 and PaDIR T=4 B=5 with their
checkpoints' settings: the best of 3 translations of the first 300 lines in batches of 32, and
the first 60 lines one at a time.
Prints one line per process. Pause other CPU work first; set OMP_NUM_THREADS for the threads.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TIMING = """
import gzip, sys, time, torch, gmlm
opener = gzip.open if sys.argv[2].endswith(".gz") else open
with opener(sys.argv[2], "rt", encoding="utf-8") as f:
    lines = [line.rstrip("\\n") for _, line in zip(range(300), f)]
out = []
for name, settings in (("ar", {"beam": 5}), ("padir", {})):
    t = gmlm.load(f"checkpoints/multi30k-de-en/{name}", device="cpu")
    t.translate(lines[:20], **settings)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        t.translate(lines, batch_size=32, **settings)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    for line in lines[:60]:
        t.translate([line], **settings)
    single = time.perf_counter() - start
    out.append(f"{name}: 300 lines, batches of 32 {min(times):.2f} s; 60 singly {single:.2f} s")
print(sys.argv[1] + ": " + "; ".join(out), flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the earlier commit (any git rev)")
    parser.add_argument("--source", required=True, help="German source lines (.gz allowed)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "baseline.tar"
        subprocess.run(
            ["git", "-C", str(ROOT), "archive", "-o", str(archive), args.baseline, "src"],
            check=True,
        )
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        trees = {f"baseline {args.baseline}": Path(tmp) / "src", "working tree": ROOT / "src"}
        for round_ in range(args.rounds):
            order = list(trees.items())
            for label, src in order[::-1] if round_ % 2 else order:  # each first in turn
                env = {**os.environ, "PYTHONPATH": str(src), "PYTHONWARNINGS": "ignore"}
                subprocess.run(
                    [sys.executable, "-c", TIMING, label, args.source],
                    check=True,
                    cwd=ROOT,
                    env=env,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
