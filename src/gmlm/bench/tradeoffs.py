"""Which system to pick, from one bench's numbers: every row (a system in a precision) as a
point of BLEU against batch-1 latency and against throughput, the Pareto fronts (the rows no
other row beats on both at once), and the choice for each job in words.

Latency is the batch-1 median end to end (text in, text out: what a user waits for);
throughput the best sentences/s of the batch sizes timed (a file is translated at the batch
size that suits it). BLEU is that of the row's translations of the timed sentences, so rows
within a few tenths of each other translate equally well for all these numbers can tell:
the choices take every row within BLEU_TOLERANCE of the best as good enough.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gmlm.bench.result import BenchResult

BLEU_TOLERANCE = 1.0
"""How far below the best BLEU a row may score and still count as translating as well, for
the choices of :func:`advice`."""


@dataclass(frozen=True)
class Point:
    """One bench row: `label` "int8 ar1 ct2 greedy" (its precision and system), its kind
    ("padir" or "ar"), its BLEU, its batch-1 median end to end (ms) and its best throughput
    (sentences/s, reached at batch size `batch_size`)."""

    label: str
    precision: str
    kind: str
    bleu: float
    latency_ms: float
    throughput: float
    batch_size: int


def points(result: BenchResult) -> list[Point]:
    """The rows of `result` that have a BLEU (all of them, in files written since rows had
    one; none before), in the bench's order."""
    found = []
    for row in result.results:
        if row.bleu is None:
            continue
        size, rates = max(row.throughput.items(), key=lambda item: item[1].sentences_per_s)
        found.append(
            Point(
                label=f"{row.precision} {row.system}",
                precision=row.precision,
                kind=row.kind,
                bleu=row.bleu,
                latency_ms=row.e2e.p50_ms,
                throughput=rates.sentences_per_s,
                batch_size=int(size),
            )
        )
    return found


def pareto_front(points: Sequence[tuple[float, float]], *, higher_x_is_better: bool) -> list[int]:
    """The indices of the points (x, y) that no other point dominates, by ascending x (then
    y): higher y is better, and higher or lower x as `higher_x_is_better` says. A point is
    dominated by one at least as good in both and better in one; equal points dominate
    neither, so both are on the front.

    One sweep from the best x on: a point is on the front if its y beats every y before it
    (or equals the point that set the best y so far, at the same x)."""
    sign = -1.0 if higher_x_is_better else 1.0
    order = sorted(range(len(points)), key=lambda i: (sign * points[i][0], -points[i][1]))
    front: list[int] = []
    best: tuple[float, float] | None = None
    for i in order:
        x, y = points[i]
        if best is None or y > best[1] or (x, y) == best:
            front.append(i)
            best = (x, y)
    return sorted(front, key=lambda i: points[i])


def latency_front(found: Sequence[Point]) -> list[Point]:
    """The points no other point beats on BLEU and batch-1 latency at once, fastest first."""
    front = pareto_front([(p.latency_ms, p.bleu) for p in found], higher_x_is_better=False)
    return [found[i] for i in front]


def throughput_front(found: Sequence[Point]) -> list[Point]:
    """The points no other point beats on BLEU and throughput at once, fastest last."""
    front = pareto_front([(p.throughput, p.bleu) for p in found], higher_x_is_better=True)
    return [found[i] for i in front]


@dataclass(frozen=True)
class Advice:
    """Which row to pick for which job: `intro` says what the numbers are, each of `lines`
    one job and its row, then the rows of each Pareto front."""

    intro: str
    lines: tuple[str, ...]


def advice(result: BenchResult) -> Advice | None:
    """The choices for each job, from the numbers of `result` (None when its rows have no
    BLEU): the best BLEU (the fastest such row where several tie), the lowest latency and
    the highest throughput among the rows within BLEU_TOLERANCE of it."""
    found = points(result)
    if not found:
        return None
    s = result.settings
    best = max(found, key=lambda p: (p.bleu, -p.latency_ms))
    near = [p for p in found if round(best.bleu - p.bleu, 6) <= BLEU_TOLERANCE]
    quick = min(near, key=lambda p: (p.latency_ms, -p.bleu))
    busy = max(near, key=lambda p: (p.throughput, p.bleu))
    machine = f"{s.cpu}" + (f", {s.gpu}" if s.gpu else "") + f", {s.threads} threads"
    within = f"within {BLEU_TOLERANCE:g} BLEU of the best"
    intro = (
        f"Which system for which job on this machine ({s.device}: {machine}), from this run's "
        f"numbers: BLEU of the {s.sentences} timed sentences, latency the batch-1 median end "
        "to end (text in, text out), throughput the best sentences/s of the batch sizes "
        f"timed ({', '.join(str(b) for b in s.batch_sizes)})"
    )
    lines = (
        f"best translations: {best.label} (BLEU {best.bleu:.2f}, {best.latency_ms:.2f} ms, "
        f"{best.throughput:.1f} sentences/s at batch size {best.batch_size})",
        f"one sentence at a time, e.g. a service (the lowest latency {within}): "
        + _pick(quick, best, f"{quick.latency_ms:.2f} ms", best.latency_ms / quick.latency_ms),
        f"translating files (the highest throughput {within}): "
        + _pick(
            busy,
            best,
            f"{busy.throughput:.1f} sentences/s at batch size {busy.batch_size}",
            busy.throughput / best.throughput,
        ),
    )
    quickest = latency_front(found)
    busiest = reversed(throughput_front(found))
    unbeaten = "the rows that no other row beats in speed or BLEU without losing in the other"
    fronts = (
        f"the Pareto front by latency ({unbeaten}), fastest first: "
        + "; ".join(f"{p.label} {p.latency_ms:.2f} ms, BLEU {p.bleu:.2f}" for p in quickest),
        "the Pareto front by throughput, fastest first: "
        + "; ".join(f"{p.label} {p.throughput:.1f} sent/s, BLEU {p.bleu:.2f}" for p in busiest),
    )
    return Advice(intro, lines + fronts)


def _pick(chosen: Point, best: Point, speed: str, gain: float) -> str:
    """`chosen` with its BLEU and `speed`, and how many times as fast it is as `best`."""
    if chosen == best:
        return f"the same row, {best.label}"
    return f"{chosen.label} (BLEU {chosen.bleu:.2f}, {speed}: {gain:.1f}x as fast as {best.label})"
