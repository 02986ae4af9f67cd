"""`gmlm theory verify`: check Lemma 2 and Theorems 1-3 exactly on a seeded grid of Ising models.

For every model in the grid and every k = 1..N the checks are
- Lemma 2: ||H - Cov(grad l)|| / ||H|| <= tol (generalised information matrix equality);
- k = N is the MLE: ||Gamma^N - I^-1|| / ||I^-1|| <= tol;
- Theorem 1: lambda_min(Gamma^k - Gamma^{k+1}) >= -tol (relative);
- Theorem 2: lambda_min(C_k I^-1 - Gamma^k) >= -tol (relative), C_k the k-Gibbs Poincare constant;
- Theorem 3: the same for an adaptive masking scheme (masks of size k whose probabilities depend
  on x), with the Poincare constant of its adaptive block dynamics, and Lemma 2 for it;
- mask averaging: Gamma_avg^k <= Gamma^k (law of total variance), a sanity check of the
  covariances that the figures overlay.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np
from tqdm import tqdm

from gmlm.errors import GmlmError
from gmlm.theory.asymptotics import asymptotics, inverse_fisher, psd_margin, spectral_norm
from gmlm.theory.chains import BlockDynamics, poincare_constant
from gmlm.theory.distributions import IsingModel
from gmlm.theory.estimators import ExponentialFamily, MaskingScheme
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


@dataclass(frozen=True)
class VerifySettings:
    min_n: int = 2
    max_n: int = 8
    seed: int = 0
    coupling_scales: tuple[float, ...] = (0.1, 0.5)
    field_scales: tuple[float, ...] = (0.0, 0.3)
    clique_couplings: tuple[float, ...] = (0.05, 0.3)
    tol: float = 1e-8


@dataclass
class ModelCase:
    name: str
    model: IsingModel


@dataclass
class CaseResult:
    model: str
    n: int
    k: int
    values: dict[str, float] = field(default_factory=dict)
    poincare: float = float("nan")
    poincare_adaptive: float = float("nan")


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


def verify_model(case: ModelCase, rng: np.random.Generator) -> list[CaseResult]:
    model = case.model
    n = model.n_vars
    family = ExponentialFamily.ising(n)
    theta = model.theta
    dist = model.distribution
    i_inv = inverse_fisher(family, theta)
    gammas = []
    results = []
    for k in range(1, n + 1):
        scheme = MaskingScheme.k_pl(n, k)
        asym = asymptotics(family, theta, scheme)
        gap = poincare_constant(BlockDynamics(dist, scheme))
        res = CaseResult(case.name, n, k, poincare=gap.poincare)
        res.values["lemma2"] = asym.lemma2_residual
        res.values["theorem2"] = psd_margin(gap.poincare * i_inv, asym.gamma)
        res.values["averaging"] = psd_margin(asym.gamma, asym.gamma_avg)
        if k == n:
            res.values["k=N is MLE"] = spectral_norm(asym.gamma - i_inv) / spectral_norm(i_inv)
        adaptive = adaptive_scheme(model.space, k, rng)
        asym_a = asymptotics(family, theta, adaptive)
        gap_a = poincare_constant(BlockDynamics(dist, adaptive))
        res.poincare_adaptive = gap_a.poincare
        res.values["lemma2 adaptive"] = asym_a.lemma2_residual
        res.values["theorem3"] = psd_margin(gap_a.poincare * i_inv, asym_a.gamma)
        gammas.append(asym.gamma)
        results.append(res)
    for k in range(1, n):
        results[k - 1].values["theorem1"] = psd_margin(gammas[k - 1], gammas[k])
    return results


@dataclass
class VerifyReport:
    settings: VerifySettings
    rows: list[CaseResult]
    seconds: float

    def worst(self) -> dict[str, dict[str, object]]:
        """Per claim: the worst value, where it occurred, and whether it passes the tolerance."""
        out: dict[str, dict[str, object]] = {}
        for claim in CLAIMS:
            cells = [(r.values[claim], r) for r in self.rows if claim in r.values]
            if not cells:
                continue
            residual = claim in RESIDUAL_CLAIMS
            value, row = (
                max(cells, key=lambda c: c[0]) if residual else min(cells, key=lambda c: c[0])
            )
            ok = value <= self.settings.tol if residual else value >= -self.settings.tol
            out[claim] = {
                "kind": "residual" if residual else "margin",
                "worst": value,
                "at": f"{row.model} N={row.n} k={row.k}",
                "checks": len(cells),
                "passed": bool(ok),
            }
        return out

    @property
    def passed(self) -> bool:
        return all(bool(v["passed"]) for v in self.worst().values())

    def to_json(self) -> dict[str, object]:
        return {
            "settings": asdict(self.settings),
            "seconds": self.seconds,
            "passed": self.passed,
            "claims": self.worst(),
            "rows": [asdict(r) for r in self.rows],
        }


def run_verify(settings: VerifySettings, progress: bool = False) -> VerifyReport:
    if settings.min_n < 1 or settings.max_n < settings.min_n:
        raise GmlmError(
            f"need 1 <= min_n <= max_n, got min_n={settings.min_n}, max_n={settings.max_n}"
        )
    if settings.max_n > 14:
        raise GmlmError(
            f"--max-n {settings.max_n} is beyond the exact-enumeration limit of verify (14): its "
            "cost grows like 4^N (all masks of every size over all 2^N states)"
        )
    rng = np.random.default_rng(settings.seed + 1)
    start = time.perf_counter()
    cases = list(model_grid(settings))
    rows: list[CaseResult] = []
    for case in tqdm(cases, desc="verify", unit="model", disable=not progress):
        rows.extend(verify_model(case, rng))
    return VerifyReport(settings, rows, time.perf_counter() - start)
