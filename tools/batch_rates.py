"""File-translation rate of PaDIR and AR by batch setting: "Batches by tokens" in
docs/history/multi30k-de-en-notes.md.

    python tools/batch_rates.py --padir checkpoints/multi30k-de-en/padir \\
        --ar checkpoints/multi30k-de-en/ar --input ../shared/data/multi30k/test_2016_flickr.de.gz \\
        --lines 1000 --threads 2 --configs batch_size=8,batch_size=64,max_tokens=4000

Both checkpoints are loaded once in this process and warmed up on the first 16 lines; then,
for --rounds rounds, every configuration translates the first --lines lines with
`Translator.translate` (PaDIR with its checkpoint's decoding, T and B as given; AR with beam
5), PaDIR and AR alternating which goes first, each timed by the wall clock and by this
process's CPU time (`time.process_time`: steadier than the wall clock when other processes
share the cores). Every configuration's translations are checked to equal the first
configuration's, line for line (the batch never changes an output). Prints a Markdown table
(median sentences/s over the rounds, each round's value, PaDIR's padded share of
row-positions) and the ratios the issue asks about; --output writes the JSON.

A measurement tool, not a gmlm command: it exists so that the table's numbers come from a
command anyone can rerun (`make batch-rates`).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

WARMUP_LINES = 16


def parse_configs(text: str) -> list[tuple[str, int]]:
    """ "batch_size=8,max_tokens=4000" -> [("batch_size", 8), ("max_tokens", 4000)]."""
    configs = []
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name not in ("batch_size", "max_tokens") or not value.isdigit() or int(value) < 1:
            raise SystemExit(
                f"batch_rates: bad configuration {item!r}: give batch_size=N or max_tokens=N, "
                "N >= 1, comma-separated"
            )
        configs.append((name, int(value)))
    return configs


def label(name: str, value: int) -> str:
    return f"{value} sentences" if name == "batch_size" else f"{value} tokens"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--padir", type=Path, required=True, help="PaDIR checkpoint folder")
    p.add_argument("--ar", type=Path, required=True, help="AR checkpoint folder")
    p.add_argument("--input", type=Path, required=True, help="source sentences (.gz allowed)")
    p.add_argument("--lines", type=int, default=320, help="first N lines of --input")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every configuration")
    p.add_argument(
        "--configs",
        default="batch_size=8,batch_size=32,batch_size=64,max_tokens=2000,max_tokens=4000,"
        "max_tokens=8000",
        help="comma-separated batch_size=N or max_tokens=N",
    )
    p.add_argument("--steps", type=int, default=4, help="PaDIR refinement passes T")
    p.add_argument("--length-beam", type=int, default=5, help="PaDIR predicted lengths B")
    p.add_argument("--beam", type=int, default=5, help="AR beam")
    p.add_argument("--output", type=Path, help="also write the result JSON here")
    args = p.parse_args(argv)
    configs = parse_configs(args.configs)
    if args.lines < 1 or args.threads < 1 or args.rounds < 1:
        raise SystemExit("batch_rates: --lines, --threads and --rounds must be at least 1")

    import torch

    import gmlm
    from gmlm import provenance
    from gmlm.data.textfiles import read_lines

    torch.set_num_threads(args.threads)
    lines = read_lines(args.input)[: args.lines]
    translators = {
        kind: gmlm.load(path, device="cpu")
        for kind, path in (("padir", args.padir), ("ar", args.ar))
    }
    settings: dict[str, dict[str, Any]] = {
        "padir": {"steps": args.steps, "length_beam": args.length_beam},
        "ar": {"beam": args.beam},
    }
    for kind, translator in translators.items():
        translator.translate(lines[:WARMUP_LINES], **settings[kind])
    wall: dict[tuple[str, int], dict[str, list[float]]] = {}
    cpu: dict[tuple[str, int], dict[str, list[float]]] = {}
    padded: dict[tuple[str, int], float] = {}
    reference: dict[str, list[str]] = {}
    for r in range(args.rounds):
        for i, config in enumerate(configs):
            kinds = ("padir", "ar") if (i + r) % 2 == 0 else ("ar", "padir")
            for kind in kinds:
                translator = translators[kind]
                translator.padding = type(translator.padding)()
                start_cpu, start_wall = time.process_time(), time.perf_counter()
                out = translator.translate(lines, **{config[0]: config[1]}, **settings[kind])
                seconds_cpu = time.process_time() - start_cpu
                seconds_wall = time.perf_counter() - start_wall
                if kind not in reference:
                    reference[kind] = out
                elif out != reference[kind]:
                    differ = sum(a != b for a, b in zip(out, reference[kind], strict=True))
                    raise SystemExit(
                        f"batch_rates: {kind} with {label(*config)} changed {differ} of "
                        f"{len(lines)} translations against {label(*configs[0])}"
                    )
                wall.setdefault(config, {}).setdefault(kind, []).append(len(lines) / seconds_wall)
                cpu.setdefault(config, {}).setdefault(kind, []).append(len(lines) / seconds_cpu)
                if kind == "padir":
                    padded[config] = translator.padding.padded_share
                print(
                    f"round {r + 1}/{args.rounds} {kind:5} {label(*config):>14}: "
                    f"{len(lines) / seconds_wall:6.2f} sent/s wall, "
                    f"{len(lines) / seconds_cpu:6.2f} per CPU-s",
                    file=sys.stderr,
                    flush=True,
                )
    rows = []
    for config in configs:
        row: dict[str, Any] = {"config": label(*config), config[0]: config[1]}
        for kind in ("padir", "ar"):
            row[kind] = {
                "wall_median": round(statistics.median(wall[config][kind]), 2),
                "wall_rounds": [round(v, 2) for v in wall[config][kind]],
                "cpu_median": round(statistics.median(cpu[config][kind]), 2),
                "cpu_rounds": [round(v, 2) for v in cpu[config][kind]],
            }
        row["padir"]["padded_share"] = round(padded[config], 4)
        rows.append(row)
    result = {
        "command": " ".join(["python", "tools/batch_rates.py", *(argv or sys.argv[1:])]),
        "lines": len(lines),
        "input": str(args.input),
        "threads": args.threads,
        "rounds": args.rounds,
        "padir": {"checkpoint": str(args.padir), **settings["padir"]},
        "ar": {"checkpoint": str(args.ar), **settings["ar"]},
        "cpu": provenance.cpu_model(),
        "torch": provenance.torch_version(),
        "python": platform.python_version(),
        "identical_outputs": True,
        "rows": rows,
    }
    print(markdown(result))
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


def markdown(result: dict[str, Any]) -> str:
    """The table and the ratios, medians over the rounds."""
    out = [
        f"{result['lines']} lines of {result['input']}, {result['threads']} thread(s), "
        f"{result['rounds']} rounds, {result['cpu']}, torch {result['torch']}; PaDIR T="
        f"{result['padir']['steps']} B={result['padir']['length_beam']}, AR beam "
        f"{result['ar']['beam']}; sentences/s, median of the rounds (wall clock | per CPU-second)",
        "",
        "| batches | PaDIR wall | PaDIR CPU | padded share | AR wall | AR CPU | PaDIR/AR (wall) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        p, a = row["padir"], row["ar"]
        out.append(
            f"| {row['config']} | {p['wall_median']:.2f} | {p['cpu_median']:.2f} | "
            f"{100 * p['padded_share']:.1f}% | {a['wall_median']:.2f} | {a['cpu_median']:.2f} | "
            f"{p['wall_median'] / a['wall_median']:.2f}x |"
        )
    first = result["rows"][0]
    for row in result["rows"][1:]:
        ratio = row["padir"]["wall_median"] / first["padir"]["wall_median"]
        out.append(f"\nPaDIR at {row['config']} / at {first['config']} (wall): {ratio:.2f}x")
    out.append("\nEvery configuration gave the first one's translations, line for line.")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
