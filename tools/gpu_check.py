"""`make gpu-check`: what gmlm does on one GPU, as a user runs it, in one Markdown table.

    python tools/gpu_check.py --data runs/gpu-check/data --out runs/gpu-check

Run it first whenever a GPU is at hand (docs/GPU.md says how, on the device tool too). It
needs a CUDA torch, gmlm importable (PYTHONPATH=src), the shipped German-English checkpoints,
and a prepared Multi30k dataset made with their tokenizer (`make gpu-check-data`, which the
Makefile's gpu-check runs first). Sections, each with its own time budget; a section that
fails is a row saying why, and the others still run:

1. default and eager: ``Translator.translate`` of PaDIR T=4 B=5 and AR beam 5, fp32 and
   bf16, batch 1 / 8 / 32, each call on new test sentences (new shapes, as a service meets
   them): median ms of 12 calls after one; "default" as ``gmlm.load`` gives it on a GPU
   (both at fixed shapes, PaDIR's refinement and each AR step by CUDA graphs), "eager" with
   both off (the rows of ../shared/tools/gpu_diag.py, for comparison row by row);
2. graphs: batch 1 with CUDA graphs at fixed shapes (the default for both), end to
   end (text in, text out) on --sentences test sentences after one untimed pass over them
   (capture): p50 / p99 ms;
3. service: ``gmlm loadtest --serve`` (open-loop Poisson, 1-line requests) of PaDIR and AR
   beam 5 on ``--device cuda`` in fp32 and in bf16: p50 / p99 at each rate and the capacity
   (highest rate with p99 under 100 ms and no errors);
4. training: ``gmlm throughput`` of small-padir, small-ar and base-padir, fp32 and bf16
   autocast: target tokens/s, the model FLOP utilisation and the bf16 / fp32 ratio;
5. compile: the same of base-padir with ``compile=true`` (torch.compile, 4 warm-up steps), to
   set against its training row;
6. batch: the same of base-padir with 4 times its batch (``max_tokens=65536``; base's is
   16,384): how much of the chip its batch leaves idle.

Writes OUT/gpu-check.md (the table, with the card, torch and the settings) and
OUT/gpu-check.json, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import gmlm  # noqa: E402

CHECKPOINTS = ROOT / "checkpoints" / "multi30k-de-en"
SYSTEMS = {"padir T=4 B=5": ("padir", {}), "ar beam 5": ("ar", {"beam": 5})}
Row = dict[str, Any]
# The subprocesses (gmlm loadtest, gmlm throughput) import gmlm from this checkout.
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
}


def ms(seconds: float) -> float:
    return round(1000 * seconds, 2)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


@dataclass(frozen=True)
class Run:
    """Where and how much: the device, and the counts a --smoke run shrinks."""

    device: str = "cuda"
    calls: int = 13  # per batch size, the first untimed
    sizes: tuple[int, ...] = (1, 8, 32)
    # training steps per timed sample: the trainer never waits for the GPU between steps
    # (gmlm.training.step), so a sample times a few steps between two waits, as training runs
    group: int = 5
    # training overrides of every config timed, and the batch section's budget: 4 times
    # base's own max_tokens (16,384)
    train_extra: tuple[str, ...] = ()
    batch_tokens: int = 65536


SMOKE = Run(
    device="cpu",
    calls=2,
    sizes=(1, 2),
    group=1,
    train_extra=("max_tokens=1024",),
    batch_tokens=2048,
)
"""--smoke: every section on the CPU with tiny counts, to check the script before a GPU
session spends minutes on it; its figures mean nothing."""


def synchronized(call: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    """Seconds of call(*args, **kwargs) with the GPU's queue drained before and after."""
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    call(*args, **kwargs)
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def batches(run: Run, sentences: list[str], **loading: bool) -> list[Row]:
    """Median ms per call at batch 1 / 8 / 32 (`loading`: gmlm.load's GPU switches)."""
    rows = []
    for system, (name, settings) in SYSTEMS.items():
        translator = gmlm.load(CHECKPOINTS / name, device=run.device, **loading)
        options = translator.options(**settings)
        for precision in ("fp32", "bf16"):
            translator.model_at(precision)  # type: ignore[arg-type]
            for size in run.sizes:
                times = []
                for i in range(run.calls):  # the first call of each size warms up
                    chunk = sentences[i * size : (i + 1) * size]
                    times.append(
                        synchronized(
                            translator.translate,
                            chunk,
                            options,
                            batch_size=size,
                            precision=precision,
                        )
                    )
                rows.append(
                    {
                        "system": system,
                        "precision": precision,
                        "batch": size,
                        "median_ms": ms(statistics.median(times[1:])),
                    }
                )
                print(f"{loading or 'default'} {system} {precision} batch {size}: {rows[-1]}")
    return rows


def graphs(run: Run, sentences: list[str]) -> list[Row]:
    rows = []
    cuda = run.device == "cuda"  # (--smoke: the fixed shapes without graphs)
    for system, (name, settings) in SYSTEMS.items():
        translator = gmlm.load(
            CHECKPOINTS / name, device=run.device, cuda_graphs=cuda, fixed_shapes=True
        )
        options = translator.options(**settings)
        for precision in ("fp32", "bf16"):
            for line in sentences:  # capture every shape first
                translator.translate([line], options, precision=precision)
            times = [
                synchronized(translator.translate, [line], options, precision=precision)
                for line in sentences
            ]
            rows.append(
                {
                    "system": system,
                    "precision": precision,
                    "p50_ms": ms(percentile(times, 50)),
                    "p99_ms": ms(percentile(times, 99)),
                    "graphs": translator.cuda_graph_count(),
                }
            )
            print(f"graphs {system} {precision}: {rows[-1]}")
    return rows


def service(
    run: Run, source: Path, out: Path, rates: str, duration: float, flags: str
) -> list[Row]:
    rows = []
    for precision in ("fp32", "bf16"):
        result = out / f"load-{precision}.json"
        serve = (
            f"--device {run.device} --precision {precision} --model padir={CHECKPOINTS / 'padir'} "
            f"--model ar={CHECKPOINTS / 'ar'} {flags}"
        )
        command = [
            sys.executable, "-m", "gmlm", "loadtest", f"--serve={serve}", "--input", str(source),
            "--rates", rates, "--duration", str(duration), "--p99-limit-ms", "100",
            "--options", 'ar={"beam": 5}', "--output", str(result),
            "--markdown", str(out / f"load-{precision}.md"),
        ]  # fmt: skip
        # (the start-up, before the first rate, includes the service's graph warm-up)
        subprocess.run(
            command, check=True, env=ENV, timeout=240 + 6 * duration * len(rates.split(","))
        )
        loaded = json.loads(result.read_text(encoding="utf-8"))
        for point in loaded["points"]:
            rows.append(
                {
                    "precision": precision,
                    "model": point["model"],
                    "offered_rps": point["offered_rps"],
                    "achieved_rps": round(point["achieved_rps"], 1),
                    "p50_ms": point["p50_ms"],
                    "p99_ms": point["p99_ms"],
                    "errors": point["errors"],
                    "capacity_rps": loaded["capacity_rps"].get(point["model"]),
                    "graph_captures": point.get("graph_captures"),
                    "graph_capture_ms": point.get("graph_capture_ms"),
                    "client_late_ms_p99": point.get("client_late_ms_p99"),
                }
            )
    return rows


def ceiling(out: Path, rates: str, duration: float) -> list[Row]:
    """tools/serve_ceiling.py: the service with a model that answers at once under the same
    open-loop load, the requests/s the HTTP layer and the load generator carry on this
    machine's CPU (what the service rows cannot pass, whatever the GPU does)."""
    result = out / "ceiling.json"
    command = [
        sys.executable, str(ROOT / "tools" / "serve_ceiling.py"), "--rates", rates,
        "--duration", str(duration), "--log", "--output", str(result),
    ]  # fmt: skip
    subprocess.run(command, check=True, env=ENV, timeout=120 + 6 * duration * len(rates.split(",")))
    loaded = json.loads(result.read_text(encoding="utf-8"))
    return [
        {
            "offered_rps": point["offered_rps"],
            "achieved_rps": round(point["achieved_rps"], 1),
            "p50_ms": point["p50_ms"],
            "p99_ms": point["p99_ms"],
            "errors": point["errors"],
            "client_late_ms_p99": point.get("client_late_ms_p99"),
        }
        for point in loaded["points"]
    ]


def training(run: Run, data: Path, steps: int, configs: tuple[str, ...], *extra: str) -> list[Row]:
    """`gmlm throughput` of each config (with the `extra` overrides), both precisions."""
    rows = []
    for config in configs:
        command = [
            sys.executable, "-m", "gmlm", "throughput", "--config", config, "--steps",
            str(steps), "--group", str(run.group), "--warmup", "4" if extra else "2",
            f"data={data}", f"device={run.device}", *run.train_extra, *extra,
        ]  # fmt: skip
        done = subprocess.run(
            command, check=True, capture_output=True, text=True, env=ENV, timeout=300
        )
        report = json.loads(done.stdout.strip().splitlines()[-1])
        rates = report["tokens_per_s"]
        rows.append(
            {
                "config": " ".join((config, *extra)),
                "rates": rates,
                "mfu": report["flop_utilisation"],
                "bf16_over_fp32": report["speedup_median"],
            }
        )
        print(f"training {config} {' '.join(extra)}: {rates}")
    return rows


def table(found: dict[str, Any]) -> str:
    lines = [
        f"`make gpu-check` on {found['device']}, torch {found['torch']}, "
        f"{found['when']}; {found['seconds']:.0f} s in all.",
        "",
        "| section | what | fp32 | bf16 |",
        "|---|---|---:|---:|",
    ]
    for section, rows in found["sections"].items():
        if isinstance(rows, str):
            lines.append(f"| {section} | failed: {rows[:300]} | | |")
            continue
        cells: dict[str, dict[str, str]] = {}
        for row in rows:
            if section in ("default", "eager"):
                what = f"{row['system']}, batch {row['batch']}: median ms"
                value = f"{row['median_ms']:.1f}"
            elif section == "graphs":
                what = f"{row['system']}, batch 1: p50 / p99 ms"
                value = f"{row['p50_ms']:.1f} / {row['p99_ms']:.1f}"
            elif section == "ceiling":
                what = (
                    f"no model (echo), CPU only, at {row['offered_rps']:g}/s: achieved/s, "
                    "p50 / p99 ms; client late p99"
                )
                p99 = "-" if row["p99_ms"] is None else f"{row['p99_ms']:.0f}"
                value = f"{row['achieved_rps']:g}, {row['p50_ms']:.1f} / {p99}"
                if row["errors"]:
                    value += f" ({sum(row['errors'].values())} errors)"
                if row.get("client_late_ms_p99") is not None:
                    value += f"; client late {row['client_late_ms_p99']:.0f} ms"
            elif section == "service":
                what = (
                    f"{row['model']} at {row['offered_rps']:g}/s: achieved/s, p50 / p99 ms; "
                    "graph captures; client late p99"
                )
                p50 = "-" if row["p50_ms"] is None else f"{row['p50_ms']:.0f}"
                p99 = "-" if row["p99_ms"] is None else f"{row['p99_ms']:.0f}"
                value = f"{row['achieved_rps']:g}, {p50} / {p99}"
                if row["errors"]:
                    value += f" ({sum(row['errors'].values())} errors)"
                if row.get("graph_captures"):
                    value += f"; {row['graph_captures']} captures, {row['graph_capture_ms']:.0f} ms"
                if row.get("client_late_ms_p99") is not None:  # the load generator kept up?
                    value += f"; client late {row['client_late_ms_p99']:.0f} ms"
            else:
                for precision, rate in row["rates"].items():
                    mfu = row["mfu"].get(precision)
                    shown = f"{rate:,.0f}" + ("" if mfu is None else f" (MFU {mfu:.1%})")
                    cells.setdefault(f"{row['config']}: target tokens/s", {})[precision] = shown
                continue
            cells.setdefault(what, {})[row.get("precision", "fp32")] = value
        for what, by in cells.items():
            lines.append(f"| {section} | {what} | {by.get('fp32', '')} | {by.get('bf16', '')} |")
        if section == "service":
            capacity = {
                (r["precision"], r["model"]): r["capacity_rps"] for r in rows if "model" in r
            }
            for model in dict.fromkeys(m for _, m in capacity):
                values = [capacity.get((p, model)) for p in ("fp32", "bf16")]
                rates = ["none" if v is None else f"{v:g}/s" for v in values]
                lines.append(
                    f"| service | {model}: capacity (p99 < 100 ms, no errors) "
                    f"| {rates[0]} | {rates[1]} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="prepared Multi30k dataset")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu-check"))
    parser.add_argument("--sentences", type=int, default=100, help="graph rows' sentences")
    parser.add_argument("--rates", default="10,100,400,1000", help="service offered rates")
    parser.add_argument("--duration", type=float, default=6, help="seconds per service rate")
    parser.add_argument(
        "--ceiling-rates", default="1000,2000,4000", help="the ceiling section's offered rates"
    )
    parser.add_argument(
        "--serve-flags",
        default="",
        help="extra flags of the served GPU (default: none, so the service runs with its GPU "
        "batching defaults, gmlm.serve.settings.GPU_BATCHING)",
    )
    parser.add_argument("--train-steps", type=int, default=6)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="check the script on the CPU: every section with tiny counts (1 service rate of "
        "1 s, 3 graph sentences, 1 training sample); the figures mean nothing",
    )
    parser.add_argument(
        "--sections",
        default="default,eager,graphs,service,ceiling,training,compile,batch",
        help="which to run, in order",
    )
    args = parser.parse_args()
    run = Run()
    if args.smoke:
        run = SMOKE
        args.sentences, args.rates, args.duration, args.train_steps = 3, "5", 1.0, 1
        args.ceiling_rates = "20"
    elif not torch.cuda.is_available():
        parser.error("no CUDA device here: run it on a machine with a GPU and a CUDA torch")
    source = args.data / "test.src.txt"
    if not source.is_file():
        parser.error(f"{source}: not found; make the dataset with `make gpu-check-data`")
    args.out.mkdir(parents=True, exist_ok=True)
    sentences = source.read_text(encoding="utf-8").splitlines()
    started = time.perf_counter()
    found: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if run.device == "cuda" else "CPU (--smoke)",
        "torch": torch.__version__,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(sys.argv),
        "sections": {},
    }
    runs: dict[str, Callable[[], list[Row]]] = {
        "default": lambda: batches(run, sentences),
        "eager": lambda: batches(run, sentences, cuda_graphs=False, fixed_shapes=False),
        "graphs": lambda: graphs(run, sentences[: args.sentences]),
        "service": lambda: service(
            run, source, args.out, args.rates, args.duration, args.serve_flags
        ),
        "ceiling": lambda: ceiling(args.out, args.ceiling_rates, args.duration),
        "training": lambda: training(
            run, args.data, args.train_steps, ("small-padir", "small-ar", "base-padir")
        ),
        "compile": lambda: training(
            run, args.data, args.train_steps, ("base-padir",), "compile=true"
        ),
        "batch": lambda: training(
            run, args.data, args.train_steps, ("base-padir",), f"max_tokens={run.batch_tokens}"
        ),
    }
    for section in args.sections.split(","):
        print(f"== {section} ({time.perf_counter() - started:.0f} s so far)", flush=True)
        try:
            found["sections"][section] = runs[section]()
        except Exception as err:  # a failed section is reported; the others still run
            found["sections"][section] = f"{type(err).__name__}: {err}"
            print(f"{section} failed: {err}", file=sys.stderr)
        found["seconds"] = time.perf_counter() - started
        text = table(found)
        (args.out / "gpu-check.md").write_text(text, encoding="utf-8")
        (args.out / "gpu-check.json").write_text(json.dumps(found, indent=1), encoding="utf-8")
        if os.environ.get("OUT"):  # the device tool's folder that comes back, after every
            for name in ("gpu-check.md", "gpu-check.json"):  # section: a timeout keeps them
                Path(os.environ["OUT"], name).write_bytes((args.out / name).read_bytes())
    print(text)


if __name__ == "__main__":
    main()
