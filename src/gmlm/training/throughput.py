"""Training throughput (target tokens per second), fp32 against bf16 autocast, in one run.

Each precision asked for (both by default) trains an identical copy of the model on the same
batches; their timed steps are interleaved (fp32, bf16, fp32, ...) so that machine noise hits
both alike, and the report gives medians and the per-pair speed-up, with the CPU it was
measured on and what that means for ``precision=auto`` (fp32 on every CPU, bf16 on bf16 GPUs,
see `resolve_precision`): whether bf16 pays on a CPU depends on its bf16 matrix units (e.g.
AMX) or their absence, so it is measured, not assumed.
"""

from __future__ import annotations

import copy
import itertools
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from gmlm.data.batching import Batch, BatchIterator
from gmlm.data.binarized import TranslationDataset
from gmlm.distributed import pick_device
from gmlm.errors import GmlmError
from gmlm.models import build_model
from gmlm.nn.layers import count_parameters
from gmlm.provenance import cpu_model, torch_threads, torch_version
from gmlm.training.config import TrainConfig, use_vocab_size
from gmlm.training.precision import resolve_precision
from gmlm.training.step_timing import time_steps
from gmlm.training.throughput_settings import ThroughputSettings
from gmlm.training.trainer import check_data_fits, training_data

HELD_BATCHES = 64
"""The most distinct batches `gmlm throughput` holds on the device; longer timings reuse them
in turn (the rate depends on their shapes, not on which sentences they hold)."""


@dataclass
class ThroughputReport:
    settings: dict[str, Any]
    tokens_per_s: dict[str, float]  # median target tokens/s per precision
    # Median over interleaved pairs of the bf16 / fp32 rate; None unless both were timed.
    speedup_median: float | None
    rates: dict[str, list[float]]
    # Per precision: 6 x parameters x median target tokens/s, in TFLOP/s, and that over the
    # device's peak (None where unknown: a CPU, an unlisted GPU).
    model_tflops: dict[str, float] = field(default_factory=dict)
    flop_utilisation: dict[str, float | None] = field(default_factory=dict)


def measure_throughput(
    cfg: TrainConfig,
    settings: ThroughputSettings | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> ThroughputReport:
    """Time `settings.steps` optimizer steps per precision (of `settings.precisions`: fp32
    and/or bf16 autocast) after `settings.warmup` untimed ones (default: ThroughputSettings's
    defaults); `clock` reads the time in seconds (tests pass a fake one to check the
    statistics)."""
    settings = settings or ThroughputSettings()
    settings.validate()
    steps, warmup, precisions = settings.steps, settings.warmup, settings.precisions
    group = settings.group
    data = training_data(cfg)
    use_vocab_size(cfg, data.tokenizer)
    cfg.validate()
    check_data_fits(cfg, data)
    device = pick_device(cfg.device)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    base = build_model(cfg.kind, cfg.model).to(device)
    needed = warmup + steps * group
    held: list[Batch] = []  # at most HELD_BATCHES distinct ones, reused in turn
    split = TranslationDataset(data, "train")
    for epoch in itertools.count():  # as many epochs as the steps need
        iterator = BatchIterator(
            split,
            cfg.max_tokens,
            seed=cfg.seed,
            max_sentences=cfg.max_sentences or None,
            rank=0,
            world_size=1,
            epoch=epoch,
        )
        if len(iterator) == 0:
            raise GmlmError("the training split yields no batches: lower max_tokens or add data")
        wanted = range(min(needed, HELD_BATCHES) - len(held))
        held.extend(batch.to(device) for _, batch in zip(wanted, iterator, strict=False))
        if len(held) == min(needed, HELD_BATCHES):
            break
    batches = [held[i % len(held)] for i in range(needed)]
    auto = copy.deepcopy(cfg)
    auto.precision = "auto"
    rates = time_steps(cfg, base, batches, precisions, warmup, clock, group)
    pairs = None
    if len(rates) == 2:
        pairs = [b / f for f, b in zip(rates["fp32"], rates["bf16"], strict=True)]
    parameters = count_parameters(base)
    recorded: dict[str, Any] = {
        "kind": cfg.kind,
        "parameters": parameters,
        "device": str(device),
        "cpu": cpu_model(),
        "auto_precision": "fp32" if resolve_precision(auto, device) is None else "bf16",
        "threads": torch_threads(),
        "max_tokens": cfg.max_tokens,
        "mean_batch_target_tokens": statistics.mean(b.tgt_tokens for b in batches[warmup:]),
        "timed_steps": steps * group,
        "steps_per_sample": group,
        "warmup_steps": warmup,
        "torch": torch_version(),
        "stages": cfg.padir.stages if cfg.kind == "padir" else None,
        "compile": cfg.compile,
    }
    medians = {k: statistics.median(v) for k, v in rates.items()}
    if resolve_precision(auto, device) is not None and len(medians) == 2:
        # where bf16 is an option, precision=auto trains in the faster (step_timing)
        recorded["auto_precision"] = "bf16" if medians["bf16"] >= medians["fp32"] else "fp32"
    peaks = peak_tflops(device)
    recorded["peak_tflops"] = peaks
    utilisation = {
        name: model_flop_utilisation(parameters, rate, peaks.get(name) if peaks else None)
        for name, rate in medians.items()
    }
    return ThroughputReport(
        recorded,
        medians,
        None if pairs is None else statistics.median(pairs),
        rates,
        {name: 6 * parameters * rate / 1e12 for name, rate in medians.items()},
        utilisation,
    )


# Dense peak TFLOP/s by GPU name (the first that the name contains) and precision: bf16 tensor
# cores, and fp32 without TF32 (torch's default for matrix products). NVIDIA's data sheets.
PEAKS = (
    ("H100 PCIe", {"bf16": 756.0, "fp32": 51.2}),
    ("H100", {"bf16": 989.4, "fp32": 66.9}),
    ("H200", {"bf16": 989.4, "fp32": 66.9}),
    ("A100", {"bf16": 312.0, "fp32": 19.5}),
)


def peak_tflops(device: torch.device) -> dict[str, float] | None:
    """The device's peak dense TFLOP/s by precision, where known (a GPU of PEAKS), else None
    (a CPU: its peak depends on its vector and matrix units, not read here)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((dict(peaks) for key, peaks in PEAKS if key in name), None)


def model_flop_utilisation(
    parameters: int, tokens_per_s: float, peak: float | None
) -> float | None:
    """6 x parameters x target tokens/s (forward and backward, the usual estimate) over the
    peak TFLOP/s; None where the peak is unknown."""
    return None if peak is None else 6 * parameters * tokens_per_s / (peak * 1e12)


def precision_verdict(report: ThroughputReport, margin: float = 0.05) -> str:
    """One line: what precision=auto picks on the measured device and whether the measured
    bf16 / fp32 speed-up (within `margin` of 1: a tie) makes it the faster choice there (or
    that it was not measured, with one precision timed)."""
    speedup, auto = report.speedup_median, report.settings["auto_precision"]
    if speedup is None:
        return (
            f"bf16 against fp32 not measured (timed: {', '.join(report.rates)}); "
            f"precision=auto picks {auto} here"
        )
    where = (
        report.settings["cpu"] if report.settings["device"] == "cpu" else report.settings["device"]
    )
    measured = f"bf16 autocast trained at {speedup:.2f}x the fp32 rate on {where}"
    if abs(speedup - 1.0) <= margin:
        return f"{measured}: within {margin:.0%}, either precision (precision=auto: {auto})"
    faster = "bf16" if speedup > 1.0 else "fp32"
    if faster == auto:
        return f"{measured}: precision=auto ({auto}) is the faster choice here"
    return f"{measured}: precision=auto picks {auto} here; set precision={faster} for speed"
