"""Does a PaDIR line translate the same wherever it stands, and how much does BLEU move with
the seed of the initial random tokens?

    python tools/draw_invariance.py --checkpoint checkpoints/multi30k-de-en/padir \
        --source ../shared/data/multi30k/val.de.gz --reference ../shared/data/multi30k/val.en.gz \
        --lines 200 --seeds 0,1,2,3,4 --output runs/draws/de-en.json

Part 1 (the first --lines lines, seed 0): translated as one file in batches of 32, then one
line at a time, then in a shuffled order (batches of 7), then the file twice in a row with the
second copy reversed; prints how many lines differ from the first translation each way
(0 is the target: a line's random tokens are keyed by its own ids, gmlm.decoding.draws).
Part 1 also decodes the lines at fixed shapes (gmlm.decoding.fixed, what a GPU runs), batched
and one at a time, and counts the lines that differ from the eager loop's translation.
Part 2 (the whole file): BLEU of each seed of --seeds, with min, max and spread, so that a
change of the draw is judged against it. fp32, the checkpoint's decoding defaults, the
torch threads of the machine (set OMP_NUM_THREADS).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import gmlm
from gmlm.evaluation.bleu import corpus_scores


def read(path: str) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a PaDIR checkpoint folder")
    parser.add_argument("--source", required=True, help="source sentences, one a line (.gz ok)")
    parser.add_argument("--reference", required=True, help="their references, line by line")
    parser.add_argument("--lines", type=int, default=200, help="lines of part 1 (default 200)")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="seeds of part 2 (default 0-4)")
    parser.add_argument("--output", help="also write the figures to this JSON file")
    args = parser.parse_args()
    sources, references = read(args.source), read(args.reference)
    if len(sources) != len(references):
        parser.error(f"{len(sources)} source lines but {len(references)} reference lines")
    translator = gmlm.load(args.checkpoint, device="cpu")
    if translator.kind != "padir":
        parser.error(f"{args.checkpoint} holds a {translator.kind} model; give a PaDIR one")
    started = time.perf_counter()
    lines = sources[: args.lines]
    whole = translator.translate(lines, batch_size=32)
    alone = [translator.translate([line])[0] for line in lines]
    order = random.Random(0).sample(range(len(lines)), len(lines))
    shuffled = translator.translate([lines[i] for i in order], batch_size=7)
    moved = [shuffled[order.index(i)] for i in range(len(lines))]
    twice = translator.translate([*lines, *lines[::-1]], batch_size=32)
    fixed = gmlm.load(args.checkpoint, device="cpu", fixed_shapes=True)
    fixed_whole = fixed.translate(lines, batch_size=32)
    fixed_alone = [fixed.translate([line])[0] for line in lines]
    differ = {
        "batch 1 vs batch 32": sum(a != b for a, b in zip(alone, whole, strict=True)),
        "fixed shapes (batch 32) vs eager": sum(
            a != b for a, b in zip(fixed_whole, whole, strict=True)
        ),
        "fixed shapes, batch 1 vs batch 32": sum(
            a != b for a, b in zip(fixed_alone, fixed_whole, strict=True)
        ),
        "shuffled (batches of 7) vs in order": sum(
            a != b for a, b in zip(moved, whole, strict=True)
        ),
        "second copy (reversed) vs first": sum(
            a != b for a, b in zip(twice[len(lines) :][::-1], twice[: len(lines)], strict=True)
        ),
    }
    print(f"{args.checkpoint}: of the first {len(lines)} lines of {args.source}, differing:")
    for what, count in differ.items():
        print(f"  {what}: {count}")
    seeds = [int(s) for s in args.seeds.split(",")]
    bleu = {}
    for seed in seeds:
        hyps = translator.translate(sources, seed=seed)
        bleu[seed] = round(corpus_scores(hyps, references)["bleu"].score, 2)
        print(f"  seed {seed}: BLEU {bleu[seed]:.2f} on all {len(sources)} lines")
    values = list(bleu.values())
    spread = {
        "min": min(values),
        "max": max(values),
        "range": round(max(values) - min(values), 2),
        "mean": round(statistics.mean(values), 2),
        "stdev": round(statistics.stdev(values), 2) if len(values) > 1 else 0.0,
    }
    print(
        f"  BLEU over seeds {args.seeds}: mean {spread['mean']:.2f}, min {spread['min']:.2f}, "
        f"max {spread['max']:.2f}, range {spread['range']:.2f}, stdev {spread['stdev']:.2f} "
        f"({time.perf_counter() - started:.0f} s, {torch.get_num_threads()} threads)"
    )
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        record = {
            "command": " ".join(sys.argv),
            "checkpoint": args.checkpoint,
            "source": args.source,
            "lines": len(lines),
            "differing_lines": differ,
            "bleu_by_seed": bleu,
            "spread": spread,
            "threads": torch.get_num_threads(),
        }
        Path(args.output).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
