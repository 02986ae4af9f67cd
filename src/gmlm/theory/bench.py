"""Timings of the theory targets (`gmlm theory poincare` and `gmlm theory bench`), with memory.

Memory is the process's peak resident set size (getrusage), which includes the interpreter and
the libraries, printed beside the resident size before the computation: the difference is what
the computation needed. `gmlm theory bench` grows N, so after each N the peak is that N's.
Tracing numpy's allocations instead (tracemalloc) costs ~25% of the time being measured.
"""

from __future__ import annotations

import math
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gmlm import provenance
from gmlm.io import atomic_write_json
from gmlm.memory import MemoryLimitError, check_memory, format_bytes
from gmlm.theory.chains import (
    ARPACK_VECTORS,
    CACHE_ENTRIES,
    BlockDynamics,
    poincare_constant,
    poincare_method,
)
from gmlm.theory.distributions import IsingModel
from gmlm.theory.estimators import MaskingScheme
from gmlm.theory.figures import estimation_figure, hitting_figure, write_figure
from gmlm.theory.settings import (
    FIGURE_COUPLINGS,
    BenchSettings,
    EstimationSettings,
    HittingSettings,
    PoincareSettings,
    VerifySettings,
)
from gmlm.theory.single_site import CHECK_EVERY, DeadlineExceeded, default_threads
from gmlm.theory.verify import run_verify

#: Assumed growth of the time from N to N + 2 until two runs have measured it (4x the states,
#: more sites, a few more Lanczos steps).
DEFAULT_GROWTH = 5.0
#: Runs shorter than this time too noisily to extrapolate from.
MIN_EXTRAPOLATE_SECONDS = 0.5


@dataclass(frozen=True)
class PoincareRun:
    """One exact Poincare constant, with how it was computed and what it cost."""

    n: int
    k: int
    states: int
    scale: float
    seed: int
    method: str
    threads: int
    poincare: float
    spectral_gap: float
    seconds: float
    start_rss_mib: float  # resident memory before the model was built
    peak_rss_mib: float  # peak resident memory of the process so far

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: Seconds between two progress lines of a long Poincare computation.
PROGRESS_EVERY = 10.0


def poincare_bytes(n: int, k: int, method: str) -> int:
    """Bytes the Poincare constant of k-Gibbs over 2^n states needs with `method`, a lower
    bound: dense, the transition matrix and its symmetrised copy ((S, S) float64 each);
    single-site, the operator's entries (about N/2 + 2 per state) and its Lanczos vectors;
    lanczos, ARPACK's vectors, the operator's temporaries and the blocks' cached conditionals."""
    states = 2**n
    if method == "dense":
        return 8 * 2 * states**2
    if method == "single-site":
        return 8 * states * (n // 2 + 8)
    cached = min(CACHE_ENTRIES, math.comb(n, k) * states)
    return 8 * (states * (min(states, ARPACK_VECTORS) + 6) + cached)


def least_applications(n: int, method: str) -> int:
    """How many times a matrix-free method applies the operator at the least: ARPACK fills its
    Krylov basis first, the single-site Lanczos recurrence checks convergence every few steps."""
    return min(2**n, ARPACK_VECTORS) if method == "lanczos" else CHECK_EVERY


def estimate_line(n: int, k: int, method: str, need: int) -> str:
    """What a Poincare computation will do, in a line, before it starts."""
    states = 2**n
    if method == "dense":
        work = f"a dense eigendecomposition of a {states:,} x {states:,} matrix"
    else:
        blocks = math.comb(n, k)
        work = (
            f"{blocks:,} block(s) over {states:,} states per operator application "
            f"({blocks * states:.2g} block-state updates), at least "
            f"{least_applications(n, method)} applications"
        )
    return f"estimate: {k}-Gibbs, N={n}, {method}: {work}; memory about {format_bytes(need)}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class ProgressLines:
    """Progress of a matrix-free Poincare computation as lines for `say`: the time of the first
    operator application and what it implies for the `least` applications the method needs at
    least, then a line every `every` seconds (the blocks done in the application under way and
    its time at that pace)."""

    def __init__(
        self,
        say: Callable[[str], None],
        least: int,
        every: float = PROGRESS_EVERY,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.say, self.least, self.every, self.clock = say, least, every, clock
        self.start = self.last = self.application_start = clock()

    def __call__(self, applications: int, blocks: int, total: int) -> None:
        now = self.clock()
        if not total:
            self.application_start = now
        if applications == 1 and not total:
            took = now - self.start
            self.say(
                f"  first operator application: {_duration(took)}; at least {self.least} "
                f"applications in all: {_duration(self.least * took)} or more"
            )
        elif now - self.last >= self.every:
            within = ""
            if total:
                pace = (now - self.application_start) * total / blocks
                within = f", {blocks:,} of {total:,} blocks of the next (about {_duration(pace)})"
            self.say(
                f"  {applications:,} operator applications{within}; "
                f"{_duration(now - self.start)} so far"
            )
        else:
            return
        self.last = now


def poincare_run(
    settings: PoincareSettings,
    deadline: float | None = None,
    say: Callable[[str], None] | None = None,
) -> PoincareRun:
    """Poincare constant of k-Gibbs on IsingModel.random(n, scale, seed), timed (model included).

    Its memory is estimated first (:func:`poincare_bytes`), an error where it exceeds what is
    free; with `say`, the estimate is a line and a long computation reports its progress."""
    settings.check()
    threads = default_threads() if settings.threads is None else settings.threads
    # k-Gibbs over spins is 1-Gibbs on binary variables exactly when k = 1.
    method = poincare_method(2**settings.n, settings.k == 1, settings.method)
    need = poincare_bytes(settings.n, settings.k, method)
    what = (
        f"the exact Poincare constant of {settings.k}-Gibbs over 2^{settings.n} states ({method})"
    )
    fix = "lower --n (each spin doubles the states)"
    check_memory(need, what, fix)
    progress = None
    if say is not None:
        say(estimate_line(settings.n, settings.k, method, need))
        progress = ProgressLines(say, least_applications(settings.n, method))
    start_rss = current_rss_mib()
    start = time.perf_counter()
    try:
        model = IsingModel.random(settings.n, settings.scale, settings.seed)
        chain = BlockDynamics(model.distribution, MaskingScheme.k_pl(settings.n, settings.k))
        gap = poincare_constant(
            chain, settings.method, deadline=deadline, threads=threads, progress=progress
        )
    except MemoryError as err:  # numpy's ArrayMemoryError too: more than the estimate
        raise MemoryLimitError(f"{what} ran out of memory ({err}); {fix}") from None
    return PoincareRun(
        settings.n,
        settings.k,
        2**settings.n,
        settings.scale,
        settings.seed,
        gap.method,
        threads,
        gap.poincare,
        gap.gap,
        time.perf_counter() - start,
        start_rss,
        peak_rss_mib(),
    )


def current_rss_mib() -> float:
    """Resident memory of this process now, in MiB (Linux /proc; NaN elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB: at least the resident size now.

    Linux updates the high-water mark behind ru_maxrss lazily (the kernel syncs its per-thread
    RSS counters in batches), so it can trail /proc's current figure by a fraction of a MiB
    (seen: 825.54 against 825.76); the larger of the two is the peak.
    """
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in bytes on macOS, KiB elsewhere
    peak_mib = peak / 2**20 if sys.platform == "darwin" else peak / 2**10
    now = current_rss_mib()
    return peak_mib if math.isnan(now) else max(peak_mib, now)


@dataclass(frozen=True)
class Sweep:
    """1-Gibbs Poincare constants for growing N, and why the growth stopped."""

    runs: list[PoincareRun]
    stopped: str

    def largest_n_within(self, limit: float) -> int | None:
        within = [r.n for r in self.runs if r.seconds <= limit]
        return max(within) if within else None


def poincare_sweep(
    settings: BenchSettings, progress: Callable[[PoincareRun], None] | None = None
) -> Sweep:
    """N = min_n, min_n + 2, ... while the next N is predicted to fit in settings.limit.

    The prediction multiplies the last time by the growth measured over the last two runs
    (DEFAULT_GROWTH before that). A run is also stopped at twice the limit, so the sweep ends in
    bounded time even when the prediction is wrong.
    """
    settings.check()
    runs: list[PoincareRun] = []
    growth = DEFAULT_GROWTH
    for n in range(settings.min_n, settings.max_n + 1, 2):
        if runs:
            last = runs[-1]
            if len(runs) >= 2 and runs[-2].seconds >= MIN_EXTRAPOLATE_SECONDS:
                growth = max(last.seconds / runs[-2].seconds, 1.0)
            predicted = last.seconds * growth
            if last.seconds > settings.limit:
                return Sweep(runs, f"N={last.n} took {last.seconds:.0f} s > {settings.limit:g} s")
            if predicted > settings.limit:
                return Sweep(
                    runs,
                    f"N={n} not run: predicted {predicted:.0f} s (x{growth:.1f} per step of 2) "
                    f"> limit {settings.limit:g} s",
                )
        run_settings = PoincareSettings(
            n=n, k=1, scale=settings.scale, seed=settings.seed, threads=settings.threads
        )
        try:
            run = poincare_run(run_settings, deadline=time.perf_counter() + 2 * settings.limit)
        except DeadlineExceeded:
            return Sweep(runs, f"N={n} stopped at twice the limit ({2 * settings.limit:g} s)")
        runs.append(run)
        if progress is not None:
            progress(run)
    return Sweep(runs, f"reached max N = {settings.max_n}")


def run_bench(
    settings: BenchSettings, out: Path, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Time verify, the three figures (written to `out`) and the Poincare sweep; write bench.json.

    Returns the JSON written, whose `verify_passed` says whether verify passed on the way.
    """
    settings.check()

    def say(line: str) -> None:
        if progress is not None:
            progress(line)

    start = time.perf_counter()
    report = run_verify(VerifySettings())
    say(f"verify (default grid, N=2..8): {report.seconds:.1f} s, passed={report.passed}")
    figure_seconds = {}
    for name, coupling in FIGURE_COUPLINGS.items():
        result = estimation_figure(EstimationSettings(coupling=coupling), name)
        write_figure(result, out)
        figure_seconds[name] = result.seconds
        say(f"{name} (paper settings): {result.seconds:.1f} s")
    result = hitting_figure(HittingSettings())
    write_figure(result, out)
    figure_seconds["figure3"] = result.seconds
    say(f"figure3 (paper settings): {result.seconds:.1f} s")
    sweep = poincare_sweep(settings, lambda run: say(run_line(run)))
    say(f"Poincare sweep stopped: {sweep.stopped}")
    data = {
        "settings": asdict(settings),
        "environment": environment(),
        "verify_default_seconds": report.seconds,
        "verify_passed": report.passed,
        "figures_seconds": figure_seconds,
        "poincare": [r.to_json() for r in sweep.runs],
        "poincare_stopped": sweep.stopped,
        "largest_n_within_limit": sweep.largest_n_within(settings.limit),
        "total_seconds": time.perf_counter() - start,
    }
    atomic_write_json(out / "bench.json", data)
    return data


def run_line(run: PoincareRun) -> str:
    """One line for people: what was computed, how, and what it cost."""
    return (
        f"Poincare, {run.k}-Gibbs, N={run.n:2d} ({run.states:>10,} states): C={run.poincare:.10g} "
        f"in {run.seconds:.2f} s ({run.method}, {run.threads} thread"
        f"{'s' if run.threads > 1 else ''}), peak RSS {run.peak_rss_mib:,.0f} MiB "
        f"({run.start_rss_mib:,.0f} MiB before)"
    )


def environment() -> dict[str, Any]:
    """How the numbers were made: versions, machine, CPU and the threads numerical code may use."""
    return {
        "gmlm": provenance.gmlm_version(),
        "python": provenance.python_version(),
        "numpy": provenance.package_version("numpy"),
        "scipy": provenance.package_version("scipy"),
        "machine": provenance.machine(),
        "cpu": provenance.cpu_model(),
        "cpus": provenance.logical_cpus(),
        "threads": default_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
