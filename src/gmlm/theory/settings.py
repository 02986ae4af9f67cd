"""The settings of every `gmlm theory` target: plain frozen dataclasses, importable without numpy.

Each field is declared once with its help and range (:func:`gmlm.settings.doc`): the
command line derives its flags from the fields (:mod:`gmlm.cli.options`) without loading numpy
or scipy (for `gmlm --help`), and the library validates them where they are used (`check()`
adds what relates two fields).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from gmlm.config import SEED, THREAD_COUNT, Range, check_settings
from gmlm.errors import GmlmError
from gmlm.settings import doc

#: The claims are exact; the tolerance only absorbs float64 rounding (1e-15 .. 1e-9 on the grid).
MAX_TOL = 1e-4
#: Exact enumeration holds float64 vectors over all 2^N states: N = 24 is 128 MiB a vector,
#: as far as the matrix-free 1-Gibbs operator goes (gmlm.theory.space.MAX_STATES).
MAX_VARS = 24
#: verify's cost grows like 4^N (all masks of every size over all 2^N states).
MAX_VERIFY_VARS = 14
VARS = Range(ge=1, le=MAX_VARS, note=f"exact enumeration holds all 2^N states, N <= {MAX_VARS}")
BLOCK = Range(ge=1, le=MAX_VARS, note="a block size k lies in 1..N")
#: Samples of one fit (Figures 1-2): each costs about 100 bytes while its masks are drawn.
MAX_SAMPLES = 10**8
#: Repetitions of a figure's experiment, and Figure 3's step budget: each repetition of each
#: (J, sampler) pair is a chain run for up to the budget's steps.
REPETITIONS = Range(ge=1, le=100_000)
SCALE = Range(ge=0, note="a standard deviation")
STRENGTH = Range(note="any finite coupling or field")
#: The clique coupling J of Figures 1 and 2 (the paper's).
FIGURE_COUPLINGS = {"figure1": 0.05, "figure2": 0.3}
PAPER = "the paper's setting, fixed by the figure"
THREADS_HELP = "threads of the 1-Gibbs product; none: OMP_NUM_THREADS, else all usable CPUs"


def check_blocks(ks: tuple[int, ...], n_vars: int) -> None:
    if any(k > n_vars for k in ks):
        raise GmlmError(f"every k must lie in 1..N = 1..{n_vars}, got {list(ks)}")


@dataclass(frozen=True)
class VerifySettings:
    """The grid: per N, random models for every (coupling scale, field scale) and clique models."""

    min_n: int = dataclasses.field(
        default=2, metadata=doc("smallest N", range=Range(ge=1, le=MAX_VERIFY_VARS))
    )
    max_n: int = dataclasses.field(
        default=8,
        metadata=doc(
            f"largest N, at most {MAX_VERIFY_VARS}",
            range=Range(
                ge=1,
                le=MAX_VERIFY_VARS,
                note="the exact-enumeration limit of verify: its cost grows like 4^N (all masks "
                "of every size over all 2^N states)",
            ),
        ),
    )
    seed: int = dataclasses.field(default=0, metadata=doc("seed of the models", range=SEED))
    coupling_scales: tuple[float, ...] = dataclasses.field(
        default=(0.1, 0.5, 1.0),
        metadata=doc(
            "comma-separated std of the random models' J_ij (1.0 is strongly coupled, cond(I) "
            "up to 2e10 at N=8)",
            flag="--couplings",
            range=SCALE,
        ),
    )
    field_scales: tuple[float, ...] = dataclasses.field(
        default=(0.0, 0.3),
        metadata=doc("comma-separated std of their h_i", flag="--fields", range=SCALE),
    )
    clique_couplings: tuple[float, ...] = dataclasses.field(
        default=(0.05, 0.3),
        metadata=doc("comma-separated J of the clique models", range=STRENGTH),
    )
    tol: float = dataclasses.field(
        default=1e-8,
        metadata=doc(
            f"tolerance of residuals and margins, in (0, {MAX_TOL:g}]",
            range=Range(
                gt=0,
                le=MAX_TOL,
                note="the claims are exact, so the tolerance only absorbs rounding; a larger one "
                "would let real violations pass, a non-positive one fails exact equalities",
            ),
        ),
    )

    def check(self) -> None:
        check_settings(self)
        if self.max_n < self.min_n:
            raise GmlmError(f"need min_n <= max_n, got min_n={self.min_n}, max_n={self.max_n}")
        if not (self.coupling_scales and self.field_scales) and not self.clique_couplings:
            raise GmlmError(
                "the grid is empty: give --couplings and --fields, or --clique-couplings"
            )


@dataclass(frozen=True)
class EstimationSettings:
    """Figures 1/2. Defaults are the paper's settings."""

    coupling: float = dataclasses.field(
        default=FIGURE_COUPLINGS["figure1"], metadata=doc("J", range=STRENGTH)
    )
    n_vars: int = dataclasses.field(default=4, metadata=doc(PAPER, cli=False, range=VARS))
    clique_size: int = dataclasses.field(default=4, metadata=doc(PAPER, cli=False, range=VARS))
    field: float = dataclasses.field(default=0.0, metadata=doc(PAPER, cli=False, range=STRENGTH))
    ks: tuple[int, ...] = dataclasses.field(
        default=(1, 2, 3, 4), metadata=doc(PAPER, cli=False, range=BLOCK)
    )
    sample_sizes: tuple[int, ...] = dataclasses.field(
        default=(100, 200, 500, 1000, 2000, 5000, 10000, 20000),
        metadata=doc(
            "comma-separated sample sizes n", flag="--sizes", range=Range(ge=1, le=MAX_SAMPLES)
        ),
    )
    masks_per_sample: Literal["one", "all"] = dataclasses.field(
        default="one",
        metadata=doc(
            "one random mask per sample (the theory's setting) or every mask applied to every "
            "sample"
        ),
    )
    repetitions: int = dataclasses.field(
        default=10, metadata=doc("repetitions", flag="--reps", range=REPETITIONS)
    )
    seed: int = dataclasses.field(default=0, metadata=doc("random seed", range=SEED))

    def check(self) -> None:
        check_settings(self)
        check_blocks(self.ks, self.n_vars)
        if self.masks_per_sample not in ("one", "all"):
            raise GmlmError(
                f"--masks-per-sample must be 'one' or 'all', got {self.masks_per_sample!r}"
            )


@dataclass(frozen=True)
class HittingSettings:
    """Figure 3. Defaults are the paper's settings; the J and k grids are our choice."""

    n_vars: int = dataclasses.field(default=10, metadata=doc(PAPER, cli=False, range=VARS))
    clique_size: int = dataclasses.field(default=4, metadata=doc(PAPER, cli=False, range=VARS))
    field: float = dataclasses.field(default=5.0, metadata=doc(PAPER, cli=False, range=STRENGTH))
    couplings: tuple[float, ...] = dataclasses.field(
        default=(1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0),
        metadata=doc("comma-separated clique couplings J", range=STRENGTH),
    )
    ks: tuple[int, ...] = dataclasses.field(
        default=(1, 2, 4, 6, 8, 10), metadata=doc("comma-separated k", range=BLOCK)
    )
    budget: int = dataclasses.field(
        default=1000, metadata=doc("step budget", range=Range(ge=1, le=10**7))
    )
    repetitions: int = dataclasses.field(
        default=10, metadata=doc("repetitions", flag="--reps", range=REPETITIONS)
    )
    seed: int = dataclasses.field(default=0, metadata=doc("random seed", range=SEED))

    def check(self) -> None:
        check_settings(self)
        check_blocks(self.ks, self.n_vars)


@dataclass(frozen=True)
class PoincareSettings:
    """The exact Poincare constant of k-Gibbs on IsingModel.random(n, scale, seed)."""

    n: int = dataclasses.field(
        default=16, metadata=doc(f"number of spins N, 1 to {MAX_VARS}", range=VARS)
    )
    k: int = dataclasses.field(
        default=1,
        metadata=doc("block size k, 1 to N; the work grows with C(N, k)", range=BLOCK),
    )
    scale: float = dataclasses.field(default=0.2, metadata=doc("std of J_ij, h_i", range=SCALE))
    seed: int = dataclasses.field(default=0, metadata=doc("seed of the model", range=SEED))
    method: Literal["auto", "dense", "lanczos", "single-site"] = dataclasses.field(
        default="auto",
        metadata=doc(
            "dense (eigendecomposition), lanczos (ARPACK on the matrix-free operator), "
            "single-site (the dedicated matrix-free 1-Gibbs operator) or auto (dense up to "
            "2^11 states, then single-site for 1-Gibbs, else lanczos)"
        ),
    )
    threads: int | None = dataclasses.field(
        default=None, metadata=doc(THREADS_HELP, range=THREAD_COUNT)
    )

    def check(self) -> None:
        check_settings(self)
        if self.k > self.n:
            raise GmlmError(f"k={self.k} must lie in 1..N = 1..{self.n}")


@dataclass(frozen=True)
class BenchSettings:
    """`gmlm theory bench`: verify, the figures, then 1-Gibbs Poincare constants for growing N."""

    limit: float = dataclasses.field(
        default=60.0,
        metadata=doc(
            "seconds one Poincare computation may take: N stops growing once the next N is "
            "predicted (from the growth of the last two) to exceed it, and a computation is "
            "stopped at twice it",
            range=Range(gt=0, le=7 * 86400, note="seconds"),
        ),
    )
    min_n: int = dataclasses.field(
        default=12,
        metadata=doc(
            "the first N timed",
            cli=False,
            range=Range(ge=2, le=MAX_VARS),
        ),
    )
    max_n: int = dataclasses.field(
        default=24,
        metadata=doc(
            "largest N",
            range=Range(ge=2, le=MAX_VARS, note="the 1-Gibbs operator's limit"),
        ),
    )
    scale: float = dataclasses.field(
        default=0.2,
        metadata=doc(
            "std of J_ij, h_i of the models timed (as poincare's)", cli=False, range=SCALE
        ),
    )
    seed: int = dataclasses.field(
        default=0, metadata=doc("seed of the models timed", cli=False, range=SEED)
    )
    threads: int | None = dataclasses.field(
        default=None, metadata=doc(THREADS_HELP, range=THREAD_COUNT)
    )

    def check(self) -> None:
        check_settings(self)
        if self.min_n > self.max_n:
            raise GmlmError(f"need min N <= max N, got {self.min_n}..{self.max_n}")
