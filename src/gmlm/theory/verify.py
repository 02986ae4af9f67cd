"""`gmlm theory verify`: check Lemma 2 and Theorems 1-3 exactly on a seeded grid of Ising models.

Every measure is scale-free: the generalised eigenvalues of a pair (A, B) are those of
A^-1/2 B A^-1/2, a *residual* of a claimed identity A = B is max |eig - 1| and a *margin* of a
claimed inequality A >= B is min eig(A^-1/2 (A - B) A^-1/2) = 1 - max eig. For every model in the
grid and every k = 1..N the checks are
- Lemma 2: residual of H = Cov(grad l) (generalised information matrix equality);
- k = N is the MLE: residual of Gamma^N = I^-1;
- Theorem 1: margin of Gamma^k >= Gamma^{k+1};
- Theorem 2: margin of C_k I^-1 >= Gamma^k, C_k the k-Gibbs Poincare constant;
- Theorem 3: the same for an adaptive masking scheme (masks of size k whose probabilities depend
  on x), with the Poincare constant of its adaptive block dynamics, and Lemma 2 for it;
- mask averaging: margin of Gamma^k >= Gamma_avg^k (law of total variance), a sanity check of
  the covariances that the figures overlay.
A residual passes when <= tol, a margin when >= -tol; a NaN anywhere fails. The grid includes
strongly coupled random models (cond(I) up to ~1e12), where only the root-based arithmetic of
:mod:`gmlm.theory.asymptotics` resolves the smallest directions.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from tqdm import tqdm

from gmlm.errors import GmlmError
from gmlm.records import OMIT_NONE, Record
from gmlm.theory.asymptotics import (
    asymptotics,
    generalised_eigenvalues,
    inverse_fisher_roots,
    psd_margin,
    residual,
)
from gmlm.theory.chains import BlockDynamics, poincare_constant
from gmlm.theory.distributions import IsingModel
from gmlm.theory.estimators import ExponentialFamily, MaskingScheme
from gmlm.theory.settings import VerifySettings
from gmlm.theory.space import StateSpace

CLAIMS = (
    "lemma2",
    "k=N is MLE",
    "theorem1",
    "theorem2",
    "theorem3",
    "lemma2 adaptive",
    "averaging",
)
#: Claims whose number is a residual (must be <= tol); the others are margins (must be >= -tol).
RESIDUAL_CLAIMS = ("lemma2", "k=N is MLE", "lemma2 adaptive")
#: Generalised eigenvalues from roots carry an error of about eps * sqrt(cond(I)) (measured against
#: 50-digit arithmetic); a model is checked only if this many times that error is within tol.
PRECISION_FACTOR = 10.0


@dataclass
class ModelCase:
    name: str
    model: IsingModel


@dataclass(frozen=True)
class CaseResult:
    """The measures of one (model, k); `values` by claim, filled as they are computed."""

    model: str
    n: int
    k: int
    values: dict[str, float] = field(default_factory=dict)
    poincare: float = float("nan")
    poincare_adaptive: float = float("nan")
    fisher_condition: float = float("nan")  # cond(I) of the model, for reading the residuals


def model_grid(settings: VerifySettings) -> Iterator[ModelCase]:
    """Random Ising models (every J scale x h scale) and the paper's clique models, per N."""
    rng = np.random.default_rng(settings.seed)
    for n in range(settings.min_n, settings.max_n + 1):
        for js, hs in itertools.product(settings.coupling_scales, settings.field_scales):
            upper = np.triu(rng.normal(0.0, js, (n, n)), 1)
            yield ModelCase(
                f"random(J~{js},h~{hs})", IsingModel(upper + upper.T, rng.normal(0, hs, n))
            )
        for cj in settings.clique_couplings:
            size = max(2, (n + 1) // 2)
            yield ModelCase(f"clique(|C|={size},J={cj})", IsingModel.clique(n, size, cj, 0.0))


def adaptive_scheme(space: StateSpace, k: int, rng: np.random.Generator) -> MaskingScheme:
    """Masks of size k with p_K(K | x) ∝ exp(sum_{i in K} a_i x_i): x-dependent, all positive."""
    masks = list(itertools.combinations(range(space.n_vars), k))
    a = rng.normal(0.0, 1.0, space.n_vars)
    scores = np.array([space.spins[:, list(m)] @ a[list(m)] for m in masks])  # (M, S)
    scores -= scores.max(axis=0, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=0, keepdims=True)
    return MaskingScheme.adaptive_masks(space, masks, weights, name=f"adaptive-{k}")


def verify_model(case: ModelCase, rng: np.random.Generator, tol: float) -> list[CaseResult]:
    try:
        return _verify_model(case, rng, tol)
    except GmlmError as err:
        raise GmlmError(
            f"{case.name} with N={case.model.n_vars}: {err}. Lower the grid's couplings "
            "(--couplings, --clique-couplings) or --max-n"
        ) from None


def _verify_model(case: ModelCase, rng: np.random.Generator, tol: float) -> list[CaseResult]:
    model = case.model
    n = model.n_vars
    family = ExponentialFamily.ising(n)
    theta = model.theta
    dist = model.distribution
    i_inv = inverse_fisher_roots(family, theta)
    sv = np.linalg.svd(i_inv.outer, compute_uv=False)
    condition = float((sv[0] / sv[-1]) ** 2)
    precision = PRECISION_FACTOR * float(np.finfo(np.float64).eps) * np.sqrt(condition)
    if precision > tol:
        raise GmlmError(
            f"cond(I) = {condition:.2g}, so float64 resolves its generalised eigenvalues only to "
            f"~{precision:.1g}, above --tol {tol:g}: a pass or a failure would be rounding noise"
        )
    gammas = []
    results = []
    for k in range(1, n + 1):
        scheme = MaskingScheme.k_pl(n, k)
        asym = asymptotics(family, theta, scheme)
        gap = poincare_constant(BlockDynamics(dist, scheme))
        adaptive = adaptive_scheme(model.space, k, rng)
        asym_a = asymptotics(family, theta, adaptive)
        gap_a = poincare_constant(BlockDynamics(dist, adaptive))
        res = CaseResult(
            case.name,
            n,
            k,
            poincare=gap.poincare,
            poincare_adaptive=gap_a.poincare,
            fisher_condition=condition,
        )
        res.values["lemma2"] = asym.lemma2_residual
        res.values["theorem2"] = psd_margin(i_inv.scaled(gap.poincare), asym.gamma_roots)
        res.values["averaging"] = psd_margin(asym.gamma_roots, asym.gamma_avg_roots)
        if k == n:
            res.values["k=N is MLE"] = residual(generalised_eigenvalues(i_inv, asym.gamma_roots))
        res.values["lemma2 adaptive"] = asym_a.lemma2_residual
        res.values["theorem3"] = psd_margin(i_inv.scaled(gap_a.poincare), asym_a.gamma_roots)
        gammas.append(asym.gamma_roots)
        results.append(res)
    for k in range(1, n):
        results[k - 1].values["theorem1"] = psd_margin(gammas[k - 1], gammas[k])
    return results


@dataclass(frozen=True, kw_only=True)
class ClaimSummary(Record):
    """One claim over the grid: its measure, the worst value and where it occurred, how many
    (model, k) checked it, and whether the worst passes the tolerance."""

    kind: Literal["residual", "margin"]
    worst: float
    at: str
    checks: int
    passed: bool


def worst_claims(rows: Sequence[CaseResult], tol: float) -> dict[str, ClaimSummary]:
    """Per claim (in CLAIMS order; claims no row checked are left out): its summary."""
    out = {}
    for claim in CLAIMS:
        cells = [(r.values[claim], r) for r in rows if claim in r.values]
        if not cells:
            continue
        is_residual = claim in RESIDUAL_CLAIMS
        nan = [c for c in cells if np.isnan(c[0])]
        if nan:  # a NaN compares false with everything: it must fail, never be skipped
            value, row = nan[0]
            ok = False
        else:
            sign = 1.0 if is_residual else -1.0
            value, row = max(cells, key=lambda c: sign * c[0])
            ok = value <= tol if is_residual else value >= -tol
        out[claim] = ClaimSummary(
            kind="residual" if is_residual else "margin",
            worst=value,
            at=f"{row.model} N={row.n} k={row.k}",
            checks=len(cells),
            passed=bool(ok),
        )
    return out


@dataclass(frozen=True, kw_only=True)
class VerifyReport(Record):
    """The result of `run_verify` (theory/verify.json): `claims` per claim, `rows` every
    (model, k); `max_fisher_condition` the largest cond(I) of the grid, how hard its worst
    model is for float64. `environment`, added by `gmlm theory verify`, is the theory
    benchmarks' provenance dict (`gmlm.theory.bench.environment`), kept as written."""

    settings: VerifySettings
    seconds: float
    passed: bool
    max_fisher_condition: float
    claims: dict[str, ClaimSummary]
    rows: tuple[CaseResult, ...]
    environment: dict[str, Any] | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def build(
        cls, settings: VerifySettings, rows: Sequence[CaseResult], seconds: float
    ) -> VerifyReport:
        """The report of `rows`, its claims judged against `settings.tol`."""
        claims = worst_claims(rows, settings.tol)
        return cls(
            settings=settings,
            seconds=seconds,
            passed=all(c.passed for c in claims.values()),
            max_fisher_condition=max((r.fisher_condition for r in rows), default=float("nan")),
            claims=claims,
            rows=tuple(rows),
        )


def run_verify(settings: VerifySettings, progress: bool = False) -> VerifyReport:
    settings.check()
    rng = np.random.default_rng(settings.seed + 1)
    start = time.perf_counter()
    cases = list(model_grid(settings))
    rows: list[CaseResult] = []
    for case in tqdm(cases, desc="verify", unit="model", disable=not progress):
        rows.extend(verify_model(case, rng, settings.tol))
    return VerifyReport.build(settings, rows, time.perf_counter() - start)
