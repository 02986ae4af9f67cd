"""A load test for people: a Markdown table per model and rate, and the latency against the
offered load, one curve per model (p50 solid, p99 dashed)."""

from __future__ import annotations

import json
from pathlib import Path

from gmlm.markdown import row, table
from gmlm.serve.loadtest import LATE_WAKEUP_S, LoadResult, RatePoint


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# The load table's columns (markdown).
COLUMNS = (
    "model",
    "offered/s",
    "sent",
    "answered",
    "achieved/s",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "errors",
    "503 p99 ms",
    "server decode p50 ms",
    "not decoding p50 ms (in handler)",
    "queue wait ms",
    "batch sentences",
    "RSS MB",
    "graph captures (ms)",
    "slowest /health ms",
    f"loop wake-ups > {LATE_WAKEUP_S * 1000:g} ms late",
    "client late p99 ms",
)


def markdown(result: LoadResult) -> str:
    s = result.settings
    given = {m: o for m, o in s["options"].items() if o}
    options = ", ".join(f"{m} {json.dumps(o)}" for m, o in given.items()) or "the models' defaults"
    lines = [
        f"Open-loop Poisson load on {result.url}: {s['duration']:g} s per rate, "
        f"{s['lines']} line(s) per request, options {options}; "
        f"{result.provenance.get('cpu', '?')}, gmlm {result.provenance.get('gmlm', '?')}.",
        "",
        *table(COLUMNS, align="lrrrrrrrlrrlrrrrrrr"),
    ]
    for p in result.points:
        errors = ", ".join(f"{k}: {v}" for k, v in p.errors.items()) or "none"
        cells = (
            p.model,
            f"{p.offered_rps:g}",
            p.sent,
            p.ok,
            f"{p.achieved_rps:.2f}",
            _ms(p.p50_ms),
            _ms(p.p90_ms),
            _ms(p.p99_ms),
            errors,
            _ms(p.refused_p99_ms),
            _ms(p.server_batch_ms_p50),
            f"{_ms(p.overhead_ms_p50)} ({_ms(p.handler_overhead_ms_p50)})",
            _ms(p.queue_wait_ms_mean),
            _ms(p.batch_sentences_mean),
            _ms(p.resident_mb),
            "-" if p.graph_captures is None else f"{p.graph_captures} ({_ms(p.graph_capture_ms)})",
            _ms(p.health_ms_max),
            "-" if p.loop_late_wakeups is None else str(p.loop_late_wakeups),
            _ms(p.client_late_ms_p99),
        )
        lines.append(row(cells))
    lines += [
        "",
        f"Capacity (highest offered rate with p99 under {s['p99_limit_ms']:g} ms and no errors):",
        "",
    ]
    for model, rate in result.capacity_rps.items():
        lines.append(f"- {model}: {'none of the rates' if rate is None else f'{rate:g}/s'}")
    return "\n".join(lines) + "\n"


def plot(result: LoadResult, path: Path) -> Path | None:
    """Latency (ms, log scale) against the offered rate; None when nothing was answered."""
    from gmlm.plotting import pyplot, save_png

    models = list(dict.fromkeys(p.model for p in result.points))
    if not any(p.p50_ms is not None for p in result.points):
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, model in enumerate(models):
        first: dict[float, RatePoint] = {}
        again: list[RatePoint] = []  # a rate offered a second time (the recovery after overload)
        for p in result.points:
            if p.model == model and p.p50_ms is not None:
                (again.append(p) if p.offered_rps in first else first.setdefault(p.offered_rps, p))
        curve = [first[rate] for rate in sorted(first)]
        rates = [p.offered_rps for p in curve]
        color = f"C{i}"
        ax.plot(rates, [p.p50_ms for p in curve], "o-", color=color, label=f"{model} p50")
        ax.plot(rates, [p.p99_ms for p in curve], "s--", color=color, label=f"{model} p99")
        if again:
            ax.plot(
                [p.offered_rps for p in again],
                [p.p99_ms for p in again],
                "x",
                color=color,
                ms=9,
                label=f"{model} p99, rate offered again",
            )
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.set_xlabel("offered load (requests/s, Poisson)")
    ax.set_ylabel("latency (ms)")
    ax.axhline(result.settings["p99_limit_ms"], color="grey", lw=0.8, ls=":")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("gmlm serve: latency against offered load")
    fig.tight_layout()
    save_png(fig, path)
    return path
