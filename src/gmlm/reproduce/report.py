"""REPORT.md of a reproduction run, with its plots, from the JSON the stages wrote.

Every number in the report is read from a file in the run folder (eval/scores.json,
bench/bench.json, attention/attention.json, theory/*.json, stages/*.json); nothing is typed in
by hand except the paper's published values, which are labelled as such.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
from pathlib import Path
from typing import Any

from gmlm.reproduce.config import STAGES, ReproduceConfig, checkpoint_dir
from gmlm.reproduce.summary import extra_sections, not_meaningful, read_headline, summary_section

# Table 1 of the paper (SacreBLEU, B = 5, WMT14 DE>EN): a different corpus, shown for scale.
PAPER_WMT14_DE_EN = {"ar": 33.50, "padir-T4": 33.49, "padir-T10": 33.63}
# The targets of the laptop reproduction: PaDIR T=4, B=5 against the AR model
# trained on the same (distilled) data, decoded with beam 5.
TARGET_BLEU_GAP = 1.0
TARGET_SPEEDUP = 2.0
PACKAGES = ("torch", "numpy", "sacrebleu", "sentencepiece", "safetensors", "matplotlib")


def read_json(path: Path) -> Any:
    """The JSON in `path`, or None when the file does not exist (a stage not run)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def software() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("gmlm", *PACKAGES):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
        versions["gmlm commit"] = commit
    except (OSError, subprocess.CalledProcessError):
        pass
    return versions


def hardware() -> str:
    import os

    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} logical CPUs"
    if torch.cuda.is_available():
        text += f"; GPU {torch.cuda.get_device_name(0)}"
    return text


def table(header: list[str], rows: list[list[Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float):
            return f"{value:.2f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _minutes(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 60:.1f} min"


def targets_section(scores: dict[str, Any] | None, bench: dict[str, Any] | None) -> list[str]:
    """Met / missed for the two targets, from eval/scores.json and bench/bench.json."""
    rows: list[list[Any]] = []
    systems = {r["system"]: r for r in (scores or {}).get("systems", [])}
    padir, ar = systems.get("padir-T4-B5"), systems.get("ar-beam5")
    if padir and ar:
        gap = ar["bleu"] - padir["bleu"]
        verdict = "met" if gap <= TARGET_BLEU_GAP else f"missed by {gap - TARGET_BLEU_GAP:.2f} BLEU"
        verdict = not_meaningful(ar["bleu"]) or verdict
        rows.append(
            [
                f"quality: PaDIR T=4 B=5 within {TARGET_BLEU_GAP} BLEU of {ar['label']}",
                f"BLEU {padir['bleu']:.2f} vs {ar['bleu']:.2f} (gap {gap:+.2f})",
                verdict,
            ]
        )
    for s in (bench or {}).get("speedups", []):
        if s["padir"] != "padir T=4 B=5" or s["ar"] != "ar beam5":
            continue
        ratio = s["e2e_p50"]
        verdict = "met" if ratio >= TARGET_SPEEDUP else f"missed: {ratio:.2f}x < {TARGET_SPEEDUP}x"
        verdict = (not_meaningful(ar["bleu"]) if ar else None) or verdict
        rows.append(
            [
                f"speed ({s['precision']}): PaDIR T=4 B=5 at least {TARGET_SPEEDUP}x faster "
                "than AR beam 5, batch-1 median",
                f"text in, text out {ratio:.2f}x; ids in, ids out {s['model_p50']:.2f}x",
                verdict,
            ]
        )
    if not rows:
        return []
    return [
        "## Targets",
        "",
        table(["target", "measured", "verdict"], rows),
        "",
        "Computed from eval/scores.json and bench/bench.json of this run; the speed verdict "
        "uses the end-to-end (text in, text out) median.",
        "",
    ]


def quality_section(scores: dict[str, Any], figures: Path, out: Path) -> list[str]:
    rows = []
    for r in scores["systems"]:
        paper = None
        if r["run"] == "ar" and r.get("beam") == 5:
            paper = PAPER_WMT14_DE_EN["ar"]
        elif r["run"] == "padir" and r.get("length_beam") == 5:
            paper = PAPER_WMT14_DE_EN.get(f"padir-T{r['steps']}")
        steps = r.get("steps", "N")
        hyps = r.get("length_beam", r.get("beam"))
        rows.append([r["label"], steps, hyps, r["bleu"], r["chrf"], r.get("length_ratio"), paper])
    lines = [
        "## Translation quality (the paper's Table 1 layout)",
        "",
        f"{scores['split']} split ({scores['sentences']} sentences), decoded in "
        f"{scores['precision']}. Steps: refinement passes T (N = autoregressive, one pass per "
        "token). # hyp.: beam size (AR) or predicted lengths decoded, B (PaDIR).",
        "",
        table(
            ["model", "steps", "# hyp.", "BLEU", "chrF", "length ratio", "paper WMT14 DE>EN BLEU"],
            rows,
        ),
        "",
        "Length ratio: hypothesis / reference length in BLEU tokens (below 1 the brevity "
        "penalty applies). "
        f"BLEU signature: `{scores['bleu_signature']}`; chrF signature: "
        f"`{scores['chrf_signature']}`. The paper column is the published result on WMT14 "
        "(a different, larger corpus, 67M-parameter models, 500k TPU steps): for scale, not a "
        "like-for-like comparison.",
        "",
    ]
    from gmlm.decoding import RefinementOptions

    defaults = RefinementOptions()
    plot = plot_bleu_vs_steps(scores, figures / "bleu_vs_steps.png")
    if plot:
        lines += [f"![BLEU vs refinement steps]({plot.relative_to(out)})", ""]
    lines += [
        "## Stutter",
        "",
        "Stutter: adjacent repeated words in a hypothesis beyond those in its reference, per "
        "100 hypothesis words; repeats: all adjacent repeated words per 100 words. PaDIR "
        f"decodes with gmlm's defaults (stutter remasking '{defaults.stutter_remask}', "
        f"adjacent duplicate tokens {'dropped' if defaults.dedup_final else 'kept'}), so its "
        "rates are measured after those fixes; the attention analysis below counts stutter on "
        "the raw output, before dedup.",
        "",
        table(
            ["model", "stutter / 100 words", "repeats / 100 words"],
            [
                [r["label"], r["stutter_per_100_words"], r["repeats_per_100_words"]]
                for r in scores["systems"]
            ]
            + [["reference (control)", None, scores["reference_repeats_per_100_words"]]],
        ),
        "",
    ]
    return lines


def plot_bleu_vs_steps(scores: dict[str, Any], path: Path) -> Path | None:
    padir = [r for r in scores["systems"] if r["run"] == "padir"]
    if not padir:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for b in sorted({r["length_beam"] for r in padir}):
        pts = sorted((r["steps"], r["bleu"]) for r in padir if r["length_beam"] == b)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"PaDIR B={b}")
    styles = iter(["--", ":", "-.", (0, (5, 1))])
    for r in scores["systems"]:
        if r["run"] != "padir":
            ax.axhline(r["bleu"], linestyle=next(styles, "--"), color="gray", label=r["label"])
    ax.set_xlabel("refinement steps T")
    ax.set_ylabel(f"BLEU ({scores['split']})")
    ax.set_xscale("log")
    ax.set_xticks(sorted({r["steps"] for r in padir}))
    ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    return path


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    from gmlm.io import atomic_open

    with atomic_open(path, "wb", encoding=None) as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)


def plot_latency_vs_batch(bench: dict[str, Any], path: Path) -> Path | None:
    """Milliseconds per sentence (1000 / throughput) against batch size, one line per
    system, one panel per precision."""
    results = [r for r in bench.get("results", []) if r.get("throughput")]
    if not results:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    precisions = sorted({r["precision"] for r in results})
    fig, axes = plt.subplots(
        1, len(precisions), figsize=(5.2 * len(precisions), 4.2), squeeze=False
    )
    for ax, precision in zip(axes[0], precisions, strict=True):
        ax.set_prop_cycle(color=[plt.get_cmap("tab20")(i / 19) for i in range(20)])
        for r in results:
            if r["precision"] != precision:
                continue
            points = sorted(
                (int(b), 1000.0 / v["sentences_per_s"]) for b, v in r["throughput"].items()
            )
            style = "-" if r["kind"] == "padir" else "--"
            ax.plot(
                [p[0] for p in points], [p[1] for p in points], style, marker="o", label=r["system"]
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("ms per sentence (1000 / throughput)")
        ax.set_title(precision)
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    _save(fig, path)
    return path


TRAINED_RUNS = (("teacher", "AR teacher"), ("ar", "AR"), ("padir", "PaDIR"))


def validations(path: Path) -> list[dict[str, Any]]:
    """The validation records of a run's metrics.jsonl, one per step (the last one written
    wins: a resumed run may repeat steps)."""
    if not path.is_file():
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else {}
        if "valid_loss" in record:
            by_step[int(record["step"])] = record
    return [by_step[k] for k in sorted(by_step)]


def training_section(cfg: ReproduceConfig, out: Path, figures: Path) -> list[str]:
    """Validation BLEU and loss of each trained model over its steps, and which checkpoint
    the evaluation used (too little training or overfitting shows here)."""
    curves = {name: validations(out / name / "metrics.jsonl") for name, _ in TRAINED_RUNS}
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return []
    labels = dict(TRAINED_RUNS)
    steps = sorted({int(r["step"]) for records in curves.values() for r in records})
    rows = []
    for step in steps:
        row: list[Any] = [step]
        for name in curves:
            record = next((r for r in curves[name] if int(r["step"]) == step), None)
            bleu = None if record is None else record.get("valid_bleu")
            loss = None if record is None else record["valid_loss"]
            row += [None if bleu is None else round(bleu, 2), loss]
        rows.append(row)
    header = ["step"]
    for name in curves:
        header += [f"{labels[name]} BLEU", f"{labels[name]} loss"]
    chosen = []
    for name in curves:
        meta = read_json(out / name / cfg.checkpoint / "meta.json")
        if meta is not None:
            chosen.append(f"{labels[name]} step {meta['step']}")
    lines = [
        "## Training",
        "",
        "Validation after every `valid_every` steps: BLEU of the first `valid_sentences` "
        "validation sentences (AR greedy; PaDIR with `valid_steps` passes and 5 lengths) and "
        "the validation loss (label-smoothed token loss, plus the length loss for PaDIR) "
        f"over the whole validation split. The evaluation uses the `{cfg.checkpoint}` "
        "checkpoint of each run: " + (", ".join(chosen) or "n/a") + ".",
        "",
        table(header, rows),
        "",
    ]
    plot = plot_validation(curves, labels, figures / "valid_bleu_vs_step.png")
    if plot:
        lines += [f"![validation BLEU vs training step]({plot.relative_to(out)})", ""]
    return lines


def plot_validation(
    curves: dict[str, list[dict[str, Any]]], labels: dict[str, str], path: Path
) -> Path | None:
    points = {
        name: [(int(r["step"]), r["valid_bleu"]) for r in records if "valid_bleu" in r]
        for name, records in curves.items()
    }
    if not any(points.values()):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, pts in points.items():
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=labels[name])
    ax.set_xlabel("training step")
    ax.set_ylabel("validation BLEU")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
    return path


def theory_section(out: Path) -> list[str]:
    verify = read_json(out / "theory" / "verify.json")
    if verify is None:
        return []
    lines = ["## Theory", "", "Exact checks (`gmlm theory verify`):", ""]
    lines.append(
        table(
            ["claim", "measure", "worst", "where", "checks", "passed"],
            [
                [k, v["kind"], f"{v['worst']:.3e}", v["at"], v["checks"], v["passed"]]
                for k, v in verify["claims"].items()
            ],
        )
    )
    lines += [
        "",
        "Measures are scale-free, from the generalised eigenvalues of the two sides A, B (those "
        "of A^-1/2 B A^-1/2): a residual of a claimed identity (max |eigenvalue - 1|) must not "
        "exceed the tolerance; a margin of a claimed inequality A >= B (1 - the largest "
        "eigenvalue) must not fall below minus the tolerance. Tolerance "
        f"{verify['settings']['tol']:g}; {verify['seconds']:.1f} s.",
    ]
    lines.append("")
    for name, caption in (
        ("figure1", "Figure 1: pseudolikelihood estimation error vs samples, J = 0.05"),
        ("figure2", "Figure 2: the same with J = 0.3"),
        ("figure3", "Figure 3: hitting R_1 from R_-1, k-Gibbs vs the independent sampler"),
    ):
        if (out / "theory" / f"{name}.png").is_file():
            lines += [f"![{caption}](theory/{name}.png)", ""]
    return lines


def stage_section(out: Path) -> list[str]:
    rows = []
    for name in STAGES:
        if name == "report":  # the stage writing this file; a record of it is a past run's
            rows.append([name, "now", None, None])
            continue
        info = read_json(out / "stages" / f"{name}.json")
        if info is None:
            rows.append([name, "not run", None, None])
            continue
        summary = info.get("summary", {})
        train = summary.get("train_seconds") if isinstance(summary, dict) else None
        rows.append([name, info["finished"], _minutes(info["seconds"]), _minutes(train)])
    return [
        "## Time per stage",
        "",
        table(["stage", "finished", "wall time (last invocation)", "training time (total)"], rows),
        "",
        "A resumed stage's wall time covers only its last invocation; training time is the "
        "trainer's own total across resumptions.",
        "",
    ]


def commands_section(cfg: ReproduceConfig, out: Path) -> list[str]:
    ar, padir, teacher = (checkpoint_dir(cfg, out, name) for name in ("ar", "padir", "teacher"))
    return [
        "## Reproduce",
        "",
        f"`gmlm reproduce --preset {cfg.preset} --out {out}` (plus any key=value overrides "
        "given to this run); the resolved configuration below reproduces it exactly as a "
        "preset file:",
        "",
        "```",
        f"gmlm reproduce --preset {out}/reproduce.yaml --out NEW_FOLDER",
        "```",
        "",
        "Each stage alone (what the pipeline runs):",
        "",
        "```",
        f"gmlm data prepare --corpus {cfg.data.corpus} --vocab-size {cfg.data.vocab_size} "
        f"--max-len {cfg.data.max_len} --out {out}/data"
        + (f" --tokenizer {cfg.data.tokenizer}" if cfg.data.tokenizer else ""),
        *(
            [
                f"gmlm train --config {cfg.teacher.preset} data={out}/data out={out}/teacher "
                + " ".join(cfg.teacher.overrides),
                f"gmlm distill --teacher {teacher} --data {out}/data "
                f"--out {out}/distill --beam {cfg.distill.beam}",
            ]
            if cfg.distill.enabled
            else []
        ),
        *(
            f"gmlm train --config {stage.preset} data={out}/{data} out={out}/{name} "
            + " ".join(stage.overrides)
            for name, stage, data in (
                ("ar", cfg.ar, "distill" if cfg.distill.enabled else "data"),
                ("padir", cfg.padir, "distill" if cfg.distill.enabled else "data"),
            )
            if not stage.checkpoint
        ),
        f"gmlm translate --checkpoint {padir} --steps 4 --length-beam 5 "
        f"--input {out}/data/{cfg.evaluate.split}.src.txt > hyp.txt",
        f"gmlm evaluate --hyp hyp.txt --ref {out}/data/{cfg.evaluate.split}.tgt.txt",
        f"gmlm bench --ar {ar} --padir {padir} "
        + (f"--teacher {teacher} " if cfg.distill.enabled else "")
        + f"--data {out}/data --sentences {cfg.bench.sentences} --warmup {cfg.bench.warmup} "
        f"--threads {cfg.bench.threads} --precision {','.join(cfg.bench.precisions)} "
        f"--batch-sizes {','.join(str(b) for b in cfg.bench.batch_sizes)}",
        f"gmlm analyze attention --checkpoint {padir} --data {out}/data",
        *(
            [f"gmlm analyze length --checkpoint {padir} --data {out}/data"]
            if cfg.length.enabled
            else []
        ),
        "```",
        "",
    ]


def write_report(
    cfg: ReproduceConfig,
    out: Path,
    bench_markdown: str | None,
    attention_markdown: str | None,
) -> Path:
    import datetime as dt

    from gmlm.io import atomic_write_text

    lines = [
        f"# gmlm reproduction: preset `{cfg.preset}`",
        "",
        cfg.description,
        "",
        f"Written {dt.datetime.now():%Y-%m-%d %H:%M}. Hardware: {hardware()}. Software: "
        + ", ".join(f"{k} {v}" for k, v in software().items())
        + ".",
        "",
    ]
    lines += summary_section(read_headline(out))
    scores = read_json(out / "eval" / "scores.json")
    lines += targets_section(scores, read_json(out / "bench" / "bench.json"))
    if scores:
        lines += quality_section(scores, out / "figures", out)
    if bench_markdown:
        lines += ["## Speed", "", bench_markdown.strip(), ""]
        plot = out / "figures" / "latency_vs_batch.png"
        if plot.is_file():
            lines += [f"![latency per sentence vs batch size]({plot.relative_to(out)})", ""]
    if attention_markdown:
        lines += [
            "## Attention analysis of stuttering (Tables 4 and 5)",
            "",
            attention_markdown.strip(),
            "",
        ]
    lines += extra_sections(out)
    lines += training_section(cfg, out, out / "figures")
    lines += theory_section(out)
    lines += stage_section(out)
    lines += commands_section(cfg, out)
    config_text = (out / "reproduce.yaml").read_text(encoding="utf-8")
    lines += ["## Resolved configuration", "", "```yaml", config_text.rstrip(), "```", ""]
    path = out / "REPORT.md"
    atomic_write_text(path, "\n".join(lines))
    return path


# Text of a published report from this line on is written by hand and survives republishing.
NOTES_MARKER = "<!-- gmlm: hand-written notes below; `--publish` keeps them -->"


def publish_report(out: Path, target: Path) -> Path:
    """Copy OUT/REPORT.md to `target` (e.g. docs/RESULTS.md) with the images it shows copied
    into a folder beside it (`target`'s stem + `-figures`) and the links rewritten to them.

    When `target` already holds a line equal to NOTES_MARKER, that line and everything after
    it (hand-written diagnosis, commands run outside the pipeline) are kept, after the new
    report."""
    import re
    import shutil

    from gmlm.errors import GmlmError
    from gmlm.io import atomic_write_text, make_dirs

    report = out / "REPORT.md"
    if not report.is_file():
        raise GmlmError(f"{report} does not exist yet: run the report stage first")
    figures = target.parent / f"{target.stem}-figures"
    make_dirs(figures, f"--publish {target}")

    def move(match: re.Match[str]) -> str:
        source = out / match.group(2)
        name = source.name if source.parent.name != "theory" else f"theory-{source.name}"
        shutil.copyfile(source, figures / name)
        return f"![{match.group(1)}]({figures.name}/{name})"

    text = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", move, report.read_text(encoding="utf-8"))
    old = target.read_text(encoding="utf-8") if target.is_file() else ""
    kept = old.find("\n" + NOTES_MARKER + "\n")
    if kept >= 0:
        text = text.rstrip("\n") + "\n\n" + old[kept + 1 :]
    atomic_write_text(target, text)
    return target
