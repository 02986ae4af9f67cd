"""The paper's Figures 1-3, computed exactly where possible and written as PNG + CSV + JSON.

Figures 1 and 2: a clique Ising model with N = |C_G| = 4, h = 0 and J = 0.05 (Figure 1) or
J = 0.3 (Figure 2). For each sample size n and repetition, draw n samples, fit the full Ising
model (all h_i, J_ij free) by k-PL for k = 1..N, and record the mean squared parameter error
||theta_hat - theta*||^2 / d. Over the empirical curves we draw the exact asymptotic prediction
Tr(Gamma^k) / (n d) of the estimator actually run. By default each sample carries one random
mask (the setting of Lemma 2 and Theorem 1, Gamma^k = H^-1); with masks_per_sample="all" every
mask is applied to every sample and the prediction is Tr(Gamma_avg^k). On this model the second
estimator is nearly as efficient as the MLE for every k, so the gap between k all but vanishes:
the paper's "larger k is better" is a statement about one mask per sample. A sample can leave
the k-PL loss without a finite minimiser (small n, strong J: whole blocks of states unseen); such
runs are decided exactly (:func:`gmlm.theory.estimators.finite_minimiser_exists`), counted in
`no_finite_minimiser` and left out of the mean, and the plot marks every point that averages
fewer than all runs, and lists the (k, n) that have no point at all.

Figure 3: N = 10, |C_G| = 4, h_i = 5 for every vertex, several J; start in R_-1 and count steps
of k-Gibbs until the state is in R_1 (budget 1000 steps, 10 repetitions), for several k, next to
the independent parallel sampler and the Proposition 4/5 predictions. Proposition 4 bounds the
expected hitting time, so a mean of few runs can exceed it by chance: the rows give the excess
in standard errors of the mean, and the plot labels each such point noise (at most NOISE_SE) or
not.
"""

from __future__ import annotations

import csv
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gmlm.io import atomic_open, atomic_write_json, make_dirs
from gmlm.memory import check_memory
from gmlm.plotting import pyplot, save_png
from gmlm.theory.asymptotics import asymptotics, inverse_fisher_roots, psd_margin
from gmlm.theory.chains import BlockDynamics, independent_parallel_report, poincare_constant
from gmlm.theory.distributions import Distribution, IsingModel, clique_region
from gmlm.theory.estimators import ExponentialFamily, MaskingScheme, fit_samples
from gmlm.theory.propositions import proposition4, proposition5
from gmlm.theory.samplers import hitting_times, independent_parallel_step, k_gibbs_step
from gmlm.theory.settings import EstimationSettings, HittingSettings

#: A mean above its Proposition 4 bound by at most this many standard errors is read as noise.
NOISE_SE = 3.0


@dataclass
class FigureResult:
    name: str
    settings: dict[str, Any]
    rows: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


def estimation_bytes(settings: EstimationSettings) -> int:
    """Bytes the largest sample of Figure 1 or 2 needs, a lower bound: per sample its uniform
    draw and state index, and with one mask per sample the cumulative mask weights and their
    comparison with a draw ((n, masks) float64 and bool) of the k with the most masks."""
    masks = max(math.comb(settings.n_vars, k) for k in settings.ks)
    per_sample = 32 + (17 * masks if settings.masks_per_sample == "one" else 0)
    return max(settings.sample_sizes) * per_sample


def estimation_figure(settings: EstimationSettings, name: str) -> FigureResult:
    """Run Figure 1 or 2: empirical k-PL error against n, with the exact prediction."""
    settings.check()
    check_memory(
        estimation_bytes(settings),
        f"{name} with {max(settings.sample_sizes):,} samples",
        "lower the largest sample size (--sizes)",
    )
    start = time.perf_counter()
    model = IsingModel.clique(
        settings.n_vars, settings.clique_size, settings.coupling, settings.field
    )
    family = ExponentialFamily.ising(settings.n_vars)
    theta = model.theta
    d = family.dim
    i_inv = inverse_fisher_roots(family, theta)
    exact: dict[str, Any] = {"trace_inverse_fisher": float(np.trace(i_inv.matrix))}
    schemes = {k: MaskingScheme.k_pl(settings.n_vars, k) for k in settings.ks}
    predictions = {}
    gammas = {}
    for k, scheme in schemes.items():
        asym = asymptotics(family, theta, scheme)
        c_k = poincare_constant(BlockDynamics(model.distribution, scheme)).poincare
        one, every = float(np.trace(asym.gamma)), float(np.trace(asym.gamma_avg))
        predictions[k] = one if settings.masks_per_sample == "one" else every
        gammas[k] = asym.gamma_roots
        exact[f"k={k}"] = {
            "trace_gamma_one_mask_per_sample": one,
            "trace_gamma_all_masks_per_sample": every,
            "poincare_constant": c_k,
            "lemma2_residual": asym.lemma2_residual,
            "theorem2_margin": psd_margin(i_inv.scaled(c_k), asym.gamma_roots),
        }
    ordered = sorted(gammas)
    for a, b in itertools.pairwise(ordered):
        exact[f"theorem1_margin_k{a}_vs_k{b}"] = psd_margin(gammas[a], gammas[b])
    rng = np.random.default_rng(settings.seed)
    rows = []
    for n in settings.sample_sizes:
        errors: dict[int, list[float]] = {k: [] for k in settings.ks}
        status: dict[int, list[str]] = {k: [] for k in settings.ks}
        for _ in range(settings.repetitions):
            samples = model.distribution.sample(n, rng)
            for k, scheme in schemes.items():
                fit = fit_samples(family, scheme, samples, settings.masks_per_sample, rng)
                status[k].append(fit.status)
                if fit.converged:
                    errors[k].append(float(np.sum((fit.theta - theta) ** 2)) / d)
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
                    "not_converged": status[k].count("not converged"),
                    "no_finite_minimiser": status[k].count("no finite minimiser"),
                }
            )
    return FigureResult(name, asdict(settings), rows, exact, time.perf_counter() - start)


def hitting_figure(settings: HittingSettings) -> FigureResult:
    """Run Figure 3: steps from R_-1 to R_1 for k-Gibbs and the independent parallel sampler."""
    s = settings
    s.check()
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
            mean = float(capped.mean())
            sem = float(capped.std(ddof=1) / np.sqrt(capped.size)) if capped.size > 1 else np.inf
            excess = None
            if prop4 is not None and mean > prop4.expected_steps_bound:
                excess = (mean - prop4.expected_steps_bound) / sem if sem > 0 else float("inf")
            rows.append(
                {
                    "J": coupling,
                    "sampler": label,
                    "k": k,
                    "hit_fraction": float(times.hit.mean()),
                    "steps_mean": mean,
                    "steps_std": float(capped.std()),
                    "steps_median": float(np.median(capped)),
                    "prop4_expected_bound": prop4.expected_steps_bound if prop4 else None,
                    "prop4_steps_delta_0.1": prop4.steps_for_delta[0.1] if prop4 else None,
                    "prop5_hit_probability_bound": (
                        prop5.hit_probability_bound(s.budget) if not k else None
                    ),
                    # a mean above the bound 1/s, in standard errors of the mean (else None)
                    "prop4_excess_se": excess,
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
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    s = result.settings
    reps = s["repetitions"]
    for k in s["ks"]:
        rows = [r for r in result.rows if r["k"] == k]
        kept = [r for r in rows if r["fits"] > 0]
        n = np.array([r["n"] for r in kept], dtype=float)
        mean = np.array([r["mse_mean"] for r in kept])
        std = np.array([r["mse_std"] for r in kept])
        line = ax.errorbar(n, mean, yerr=0.5 * std, marker="o", ms=3, capsize=3, label=f"k={k}")
        color = line[0].get_color()
        ax.plot([r["n"] for r in rows], [r["predicted_mse"] for r in rows], "--", color=color, lw=1)
        few = [r for r in kept if r["fits"] < reps]  # ringed: averages fewer than all runs
        ax.plot([r["n"] for r in few], [r["mse_mean"] for r in few], "o", ms=8, mfc="none", c=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of samples n")
    ax.set_ylabel("mean squared parameter error")
    ax.set_title(
        f"k-PL on an Ising clique, N={s['n_vars']}, J={s['coupling']}, h={s['field']}; "
        "dashed: exact Tr(Γ_k)/(n d)\n"
        "mean ± 0.5 std over the runs whose loss has a finite minimiser "
        f"(all {reps} unless ringed)",
        fontsize=8,
    )
    notes = estimation_notes(result)
    if notes:
        fig.text(0.01, 0.01, "\n".join(notes), fontsize=6, wrap=True)
    ax.legend()
    fig.tight_layout(rect=(0, 0.025 * len(notes), 1, 1))
    save_png(fig, path, dpi=130)


def estimation_notes(result: FigureResult) -> list[str]:
    """The plot's footnotes: points averaging fewer than all runs, and (k, n) with no point."""
    reps = result.settings["repetitions"]
    partial = [f"k={r['k']} n={r['n']}: {r['fits']}" for r in result.rows if 0 < r["fits"] < reps]
    missing = [f"k={r['k']} n={r['n']}" for r in result.rows if r["fits"] == 0]
    notes = []
    if partial:
        notes.append(f"ringed, runs averaged (of {reps}): " + ", ".join(partial))
    if missing:
        notes.append("no point, as no run has a finite minimiser: " + ", ".join(missing))
    return notes


def hitting_notes(result: FigureResult) -> list[str]:
    """The plot's footnote: each mean above its Proposition 4 bound, and whether that is noise."""
    notes = []
    for r in result.rows:
        z = r["prop4_excess_se"]
        if z is not None:
            verdict = "sampling noise" if z <= NOISE_SE else "beyond sampling noise"
            notes.append(f"{r['sampler']} at J={r['J']:g}: {z:.1f} SE ({verdict})")
    if not notes:
        return []
    reps = result.settings["repetitions"]
    return [
        f"means above their Prop. 4 bound, in standard errors of a {reps}-run mean: "
        + "; ".join(notes)
    ]


def _plot_hitting(result: FigureResult, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.8, 4.8))
    s = result.settings
    labels = list(dict.fromkeys(r["sampler"] for r in result.rows))
    above = []
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
        for r in rows:
            if r["prop4_excess_se"] is not None:
                above.append((r, line[0].get_color()))
    ax.axhline(s["budget"], color="grey", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("clique coupling J")
    ax.set_ylabel(f"steps to reach R_1 (capped at budget {s['budget']})")
    ax.set_title(
        f"N={s['n_vars']}, |C_G|={s['clique_size']}, h={s['field']}, start in R_-1, "
        f"{s['repetitions']} runs; dotted: Prop. 4 bound 1/s",
        fontsize=9,
    )
    for r, color in above:
        ax.annotate(
            f"+{r['prop4_excess_se']:.1f} SE",
            (r["J"], r["steps_mean"]),
            textcoords="offset points",
            xytext=(4, -9),
            fontsize=6,
            color=color,
        )
    notes = hitting_notes(result)
    if notes:
        fig.text(0.01, 0.01, notes[0], fontsize=6, wrap=True)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout(rect=(0, 0.05 if notes else 0, 1, 1))
    save_png(fig, path, dpi=130)


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
