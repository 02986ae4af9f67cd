"""The paper's Figures 1-3, computed exactly where possible and written as PNG + CSV + JSON.

Figures 1 and 2: a clique Ising model with N = |C_G| = 4, h = 0 and J = 0.05 (Figure 1) or
J = 0.3 (Figure 2). For each sample size n and repetition, draw n samples, fit the full Ising
model (all h_i, J_ij free) by k-PL for k = 1..N, and record the mean squared parameter error
||theta_hat - theta*||^2 / d. Over the empirical curves we draw the exact asymptotic prediction
Tr(Gamma^k) / (n d) of the estimator actually run. By default each sample carries one random
mask (the setting of Lemma 2 and Theorem 1, Gamma^k = H^-1); with masks_per_sample="all" every
mask is applied to every sample and the prediction is Tr(Gamma_avg^k). On this model the second
estimator is nearly as efficient as the MLE for every k, so the gap between k all but vanishes:
the paper's "larger k is better" is a statement about one mask per sample.

Figure 3: N = 10, |C_G| = 4, h_i = 5 for every vertex, several J; start in R_-1 and count steps
of k-Gibbs until the state is in R_1 (budget 1000 steps, 10 repetitions), for several k, next to
the independent parallel sampler and the Proposition 4/5 predictions.
"""

from __future__ import annotations

import csv
import itertools
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gmlm.errors import GmlmError
from gmlm.io import atomic_open, atomic_write_json, make_dirs
from gmlm.theory.asymptotics import asymptotics, inverse_fisher, psd_margin
from gmlm.theory.chains import BlockDynamics, independent_parallel_report, poincare_constant
from gmlm.theory.distributions import Distribution, IsingModel, clique_region
from gmlm.theory.estimators import ExponentialFamily, MaskingScheme, fit_samples
from gmlm.theory.propositions import proposition4, proposition5
from gmlm.theory.samplers import hitting_times, independent_parallel_step, k_gibbs_step


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


@dataclass
class FigureResult:
    name: str
    settings: dict[str, Any]
    rows: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def estimation_figure(settings: EstimationSettings, name: str) -> FigureResult:
    """Run Figure 1 or 2: empirical k-PL error against n, with the exact prediction."""
    _check_estimation(settings)
    start = time.perf_counter()
    model = IsingModel.clique(
        settings.n_vars, settings.clique_size, settings.coupling, settings.field
    )
    family = ExponentialFamily.ising(settings.n_vars)
    theta = model.theta
    d = family.dim
    i_inv = inverse_fisher(family, theta)
    exact: dict[str, Any] = {"trace_inverse_fisher": float(np.trace(i_inv))}
    schemes = {k: MaskingScheme.k_pl(settings.n_vars, k) for k in settings.ks}
    predictions = {}
    gammas = {}
    for k, scheme in schemes.items():
        asym = asymptotics(family, theta, scheme)
        c_k = poincare_constant(BlockDynamics(model.distribution, scheme)).poincare
        one = settings.masks_per_sample == "one"
        predictions[k] = float(np.trace(asym.gamma if one else asym.gamma_avg))
        gammas[k] = asym.gamma
        exact[f"k={k}"] = {
            "trace_gamma_one_mask_per_sample": float(np.trace(asym.gamma)),
            "trace_gamma_all_masks_per_sample": predictions[k],
            "poincare_constant": c_k,
            "lemma2_residual": asym.lemma2_residual,
            "theorem2_margin": psd_margin(c_k * i_inv, asym.gamma),
        }
    ordered = sorted(gammas)
    for a, b in itertools.pairwise(ordered):
        exact[f"theorem1_margin_k{a}_vs_k{b}"] = psd_margin(gammas[a], gammas[b])
    rng = np.random.default_rng(settings.seed)
    rows = []
    for n in settings.sample_sizes:
        errors: dict[int, list[float]] = {k: [] for k in settings.ks}
        failed = dict.fromkeys(settings.ks, 0)
        for _ in range(settings.repetitions):
            samples = model.distribution.sample(n, rng)
            for k, scheme in schemes.items():
                fit = fit_samples(family, scheme, samples, settings.masks_per_sample, rng)
                if fit.converged:
                    errors[k].append(float(np.sum((fit.theta - theta) ** 2)) / d)
                else:
                    failed[k] += 1
        for k in settings.ks:
            errs = np.array(errors[k])
            rows.append(
                {
                    "k": k,
                    "n": n,
                    "mse_mean": float(errs.mean()) if errs.size else float("nan"),
                    "mse_std": float(errs.std()) if errs.size else float("nan"),
                    "predicted_mse": predictions[k] / (n * d),
                    "fits": int(errs.size),
                    "not_converged": failed[k],
                }
            )
    return FigureResult(name, asdict(settings), rows, exact, time.perf_counter() - start)


def _check_estimation(s: EstimationSettings) -> None:
    if s.repetitions < 1:
        raise GmlmError(f"--reps must be >= 1, got {s.repetitions}")
    if any(k < 1 or k > s.n_vars for k in s.ks):
        raise GmlmError(f"every k must lie in 1..N = 1..{s.n_vars}, got {list(s.ks)}")
    if any(n < 1 for n in s.sample_sizes):
        raise GmlmError("sample sizes must be >= 1")
    if s.masks_per_sample not in ("one", "all"):
        raise GmlmError(f"--masks-per-sample must be 'one' or 'all', got {s.masks_per_sample!r}")


def hitting_figure(settings: HittingSettings) -> FigureResult:
    """Run Figure 3: steps from R_-1 to R_1 for k-Gibbs and the independent parallel sampler."""
    s = settings
    if any(k < 1 or k > s.n_vars for k in s.ks):
        raise GmlmError(f"every k must lie in 1..N = 1..{s.n_vars}, got {list(s.ks)}")
    if s.repetitions < 1 or s.budget < 1:
        raise GmlmError("--reps and the budget must be >= 1")
    start = time.perf_counter()
    clique = list(range(s.clique_size))
    rng = np.random.default_rng(s.seed)
    rows = []
    extra: dict[str, Any] = {}
    for coupling in s.couplings:
        model = IsingModel.clique(s.n_vars, clique, coupling, s.field)
        dist = model.distribution
        target = clique_region(dist.space, clique, +1)
        x0 = _start_in(dist, clique_region(dist.space, clique, -1), s.repetitions, rng)
        samplers = [(f"{k}-Gibbs", k, k_gibbs_step(dist, k)) for k in s.ks]
        samplers.append(("independent parallel", 0, independent_parallel_step(dist)))
        prop5 = proposition5(model, clique)
        for label, k, step in samplers:
            times = hitting_times(dist, step, x0, target, s.budget, rng)
            capped = times.capped()
            prop4 = proposition4(model, clique, k) if k else None
            rows.append(
                {
                    "J": coupling,
                    "sampler": label,
                    "k": k,
                    "hit_fraction": float(times.hit.mean()),
                    "steps_mean": float(capped.mean()),
                    "steps_std": float(capped.std()),
                    "steps_median": float(np.median(capped)),
                    "prop4_expected_bound": prop4.expected_steps_bound if prop4 else None,
                    "prop4_steps_delta_0.1": prop4.steps_for_delta[0.1] if prop4 else None,
                    "prop5_hit_probability_bound": (
                        prop5.hit_probability_bound(s.budget) if not k else None
                    ),
                }
            )
        if s.n_vars <= 12:
            report = independent_parallel_report(dist)
            extra[f"J={coupling}"] = {
                "parallel_sampler_tv_to_p": report.tv_to_p,
                "prop5_escape_probability_max": prop5.escape_probability_max,
            }
    return FigureResult("figure3", asdict(s), rows, extra, time.perf_counter() - start)


def _start_in(
    dist: Distribution, region: np.ndarray, count: int, rng: np.random.Generator
) -> np.ndarray:
    """(count, N) digit rows drawn from p conditioned on `region` (e.g. R_-1)."""
    probs = np.where(region, dist.probs, 0.0)
    restricted = Distribution.from_probs(dist.space, probs)
    return dist.space.states[restricted.sample(count, rng)].astype(np.int64)


def write_figure(result: FigureResult, out_dir: Path) -> list[Path]:
    """Write NAME.png, NAME.csv and NAME.json (settings, exact quantities, runtime) atomically."""
    make_dirs(out_dir, f"--out {out_dir}")
    csv_path = out_dir / f"{result.name}.csv"
    with atomic_open(csv_path, "w") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(result.rows[0]))
        writer.writeheader()
        writer.writerows(result.rows)
    json_path = out_dir / f"{result.name}.json"
    atomic_write_json(
        json_path,
        {
            "figure": result.name,
            "settings": result.settings,
            "seconds": result.seconds,
            "exact": result.extra,
            "rows": result.rows,
        },
    )
    png_path = out_dir / f"{result.name}.png"
    if result.name == "figure3":
        _plot_hitting(result, png_path)
    else:
        _plot_estimation(result, png_path)
    return [png_path, csv_path, json_path]


def _plot_estimation(result: FigureResult, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    s = result.settings
    for k in s["ks"]:
        rows = [r for r in result.rows if r["k"] == k]
        n = np.array([r["n"] for r in rows], dtype=float)
        mean = np.array([r["mse_mean"] for r in rows])
        std = np.array([r["mse_std"] for r in rows])
        line = ax.errorbar(n, mean, yerr=0.5 * std, marker="o", ms=3, capsize=3, label=f"k={k}")
        ax.plot(n, [r["predicted_mse"] for r in rows], "--", color=line[0].get_color(), lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of samples n")
    ax.set_ylabel("mean squared parameter error")
    ax.set_title(
        f"k-PL on an Ising clique, N={s['n_vars']}, J={s['coupling']}, h={s['field']}\n"
        f"mean ± 0.5 std over {s['repetitions']} runs; dashed: exact Tr(Γ_k)/(n d)",
        fontsize=9,
    )
    ax.legend()
    fig.tight_layout()
    _save(fig, path)


def _plot_hitting(result: FigureResult, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.8, 4.6))
    s = result.settings
    labels = list(dict.fromkeys(r["sampler"] for r in result.rows))
    for label in labels:
        rows = [r for r in result.rows if r["sampler"] == label]
        coupling = [r["J"] for r in rows]
        mean = np.array([r["steps_mean"] for r in rows])
        std = np.array([r["steps_std"] for r in rows])
        style = "k-s" if label == "independent parallel" else "-o"
        line = ax.errorbar(coupling, mean, yerr=0.5 * std, fmt=style, ms=3, capsize=3, label=label)
        bound = [r["prop4_expected_bound"] for r in rows]
        if all(b is not None for b in bound):
            ax.plot(coupling, np.minimum(bound, s["budget"]), ":", color=line[0].get_color(), lw=1)
    ax.axhline(s["budget"], color="grey", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("clique coupling J")
    ax.set_ylabel(f"steps to reach R_1 (capped at budget {s['budget']})")
    ax.set_title(
        f"N={s['n_vars']}, |C_G|={s['clique_size']}, h={s['field']}, start in R_-1, "
        f"{s['repetitions']} runs; dotted: Prop. 4 bound 1/s",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    _save(fig, path)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    with atomic_open(path, "wb") as handle:
        fig.savefig(handle, format="png", dpi=130)
    _pyplot().close(fig)


def summary_lines(result: FigureResult, columns: Sequence[str]) -> list[str]:
    """A plain-text table of the chosen columns, for printing."""
    widths = [max(len(c), 12) for c in columns]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True))]
    for row in result.rows:
        cells = []
        for c, w in zip(columns, widths, strict=True):
            v = row[c]
            text = f"{v:.4g}" if isinstance(v, float) else ("-" if v is None else str(v))
            cells.append(text.rjust(w))
        lines.append("  ".join(cells))
    return lines
