"""The settings of every `gmlm theory` target: plain frozen dataclasses, importable without numpy.

The command line builds its flags and defaults from these fields without loading numpy or scipy
(for `gmlm --help`), and the library validates them where they are used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gmlm.errors import GmlmError

#: The claims are exact; the tolerance only absorbs float64 rounding (1e-15 .. 1e-9 on the grid).
MAX_TOL = 1e-4


@dataclass(frozen=True)
class VerifySettings:
    """The grid: per N, random models for every (coupling scale, field scale) and clique models."""

    min_n: int = 2
    max_n: int = 8
    seed: int = 0
    #: std of the random J_ij; 1.0 is strongly coupled (cond(I) up to 2e10 on the default grid)
    coupling_scales: tuple[float, ...] = (0.1, 0.5, 1.0)
    field_scales: tuple[float, ...] = (0.0, 0.3)
    clique_couplings: tuple[float, ...] = (0.05, 0.3)
    tol: float = 1e-8

    def check(self) -> None:
        if self.min_n < 1 or self.max_n < self.min_n:
            raise GmlmError(f"need 1 <= min_n <= max_n, got min_n={self.min_n}, max_n={self.max_n}")
        if self.max_n > 14:
            raise GmlmError(
                f"--max-n {self.max_n} is beyond the exact-enumeration limit of verify (14): its "
                "cost grows like 4^N (all masks of every size over all 2^N states)"
            )
        if not 0.0 < self.tol <= MAX_TOL:
            raise GmlmError(
                f"--tol must be positive and at most {MAX_TOL:g} (got {self.tol:g}): the claims "
                "are exact, so the tolerance only absorbs rounding; a larger one would let real "
                "violations pass, a non-positive one fails exact equalities"
            )
        scales = (*self.coupling_scales, *self.field_scales)
        if not all(math.isfinite(v) and v >= 0 for v in scales):
            raise GmlmError(f"coupling and field scales must be finite and >= 0, got {scales}")
        if not all(math.isfinite(v) for v in self.clique_couplings):
            raise GmlmError(f"clique couplings must be finite, got {self.clique_couplings}")
        if not (self.coupling_scales and self.field_scales) and not self.clique_couplings:
            raise GmlmError(
                "the grid is empty: give --couplings and --fields, or --clique-couplings"
            )


@dataclass(frozen=True)
class EstimationSettings:
    """Figures 1/2. Defaults are the paper's settings."""

    coupling: float = 0.05
    n_vars: int = 4
    clique_size: int = 4
    field: float = 0.0
    ks: tuple[int, ...] = (1, 2, 3, 4)
    sample_sizes: tuple[int, ...] = (100, 200, 500, 1000, 2000, 5000, 10000, 20000)
    repetitions: int = 10
    seed: int = 0
    masks_per_sample: str = "one"


@dataclass(frozen=True)
class HittingSettings:
    """Figure 3. Defaults are the paper's settings; the J and k grids are our choice."""

    n_vars: int = 10
    clique_size: int = 4
    field: float = 5.0
    couplings: tuple[float, ...] = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0)
    ks: tuple[int, ...] = (1, 2, 4, 6, 8, 10)
    budget: int = 1000
    repetitions: int = 10
    seed: int = 0


@dataclass(frozen=True)
class PoincareSettings:
    """The exact Poincare constant of k-Gibbs on IsingModel.random(n, scale, seed)."""

    n: int = 16
    k: int = 1
    scale: float = 0.2  # std of J_ij and h_i
    seed: int = 0
    method: str = "auto"
    #: threads of the matrix-free 1-Gibbs product; None: OMP_NUM_THREADS, else all usable CPUs
    threads: int | None = None

    def check(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise GmlmError(f"--threads must be >= 1, got {self.threads}")
        if not self.n >= 1:
            raise GmlmError(f"--n must be >= 1, got {self.n}")


@dataclass(frozen=True)
class BenchSettings:
    """`gmlm theory bench`: verify, the figures, then 1-Gibbs Poincare constants for growing N."""

    #: seconds one Poincare computation may take: N stops growing once the next N is predicted
    #: (from the growth of the last two) to exceed it, and a computation is stopped at twice it
    limit: float = 60.0
    min_n: int = 12
    max_n: int = 24
    scale: float = 0.2
    seed: int = 0
    threads: int | None = None

    def check(self) -> None:
        if not (math.isfinite(self.limit) and self.limit > 0):
            raise GmlmError(f"--limit must be a positive number of seconds, got {self.limit}")
        if not 2 <= self.min_n <= self.max_n <= 24:
            raise GmlmError(
                f"need 2 <= min N <= max N <= 24 (the 1-Gibbs operator's limit), got "
                f"{self.min_n}..{self.max_n}"
            )
        if self.threads is not None and self.threads < 1:
            raise GmlmError(f"--threads must be >= 1, got {self.threads}")
