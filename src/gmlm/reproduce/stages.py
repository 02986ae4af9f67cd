"""The stages of `gmlm reproduce`, one function each: `stage(ctx) -> summary dict`.

Each stage reads the outputs of earlier stages from the run folder and writes its own under
it (the results as typed records: eval/scores.json, bench/bench.json, ...); its summary is a
few numbers of its own shape for stages/NAME.json (:class:`StageRecord`). The pipeline
(:mod:`gmlm.reproduce.pipeline`) records a stage as done only after its function returns, so
an interrupted stage runs again (training and distillation resume from their own checkpoints;
evaluation skips systems whose hypotheses are already written with the same settings:
:mod:`gmlm.reproduce.hypotheses`).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gmlm.errors import GmlmError
from gmlm.io import atomic_write_text, make_dirs
from gmlm.reproduce.config import (
    ReproduceConfig,
    TrainStage,
    checkpoint_dir,
    given_as_is,
    stage_checkpoint,
)
from gmlm.reproduce.data_inputs import (
    data_config,
    data_corpus,
    data_files,
    file_signature,
    stand_in_missing,
)
from gmlm.reproduce.hypotheses import (
    MadeWith,
    save_translations,
    saved_translations,
    sources_digest,
)
from gmlm.reproduce.stage_record import FINGERPRINT, FINGERPRINTS, INPUTS, STAND_IN
from gmlm.reproduce.stand_in import (
    ExampleTranslations,
    needs_multi30k,
    stand_in_reason,
)

if TYPE_CHECKING:
    from gmlm.training.config import TrainConfig

Log = Callable[[str], None]


@dataclass
class Context:
    cfg: ReproduceConfig
    out: Path
    progress: bool
    log: Log

    @property
    def data_dir(self) -> Path:
        return self.out / "data"

    @property
    def student_data_dir(self) -> Path:
        """The data the AR baselines and PaDIR train on: distilled, unless distillation is off."""
        return self.out / "distill" if self.cfg.distill.enabled else self.data_dir

    def run_dir(self, name: str) -> Path:
        return self.out / name

    def checkpoint(self, name: str) -> Path:
        return checkpoint_dir(self.cfg, self.out, name)

    @property
    def stand_in(self) -> str | None:
        """Why the data stage prepared gmlm's example sentences instead of the corpus (the
        quality stages then skip), or None when it prepared the corpus."""
        return stand_in_reason(self.out)


# ----------------------------------------------------------------------------- theory
def theory(ctx: Context) -> dict[str, Any]:
    from gmlm.theory.figures import estimation_figure, hitting_figure, write_figure
    from gmlm.theory.settings import FIGURE_COUPLINGS
    from gmlm.theory.verify import run_verify

    t = ctx.cfg.theory
    if not t.enabled:
        return {"skipped": "theory.enabled=false"}
    out = ctx.out / "theory"
    make_dirs(out, f"cannot write {out}")
    report = run_verify(t.verify(), progress=ctx.progress)
    report.write(out / "verify.json")
    for claim, summary in report.claims.items():
        ctx.log(f"  {claim}: worst {summary.worst:.3e} ({'ok' if summary.passed else 'FAIL'})")
    if not report.passed:
        raise GmlmError(f"theory verify failed; see {out / 'verify.json'}")
    seconds = {"verify": report.seconds}
    for name, coupling in FIGURE_COUPLINGS.items():
        result = estimation_figure(t.estimation(coupling), name)
        write_figure(result, out)
        seconds[name] = result.seconds
    result = hitting_figure(t.hitting())
    write_figure(result, out)
    seconds["figure3"] = result.seconds
    return {
        "verify_passed": report.passed,
        "worst": {k: v.worst for k, v in report.claims.items()},
        "seconds": seconds,
    }


# ------------------------------------------------------------------------------- data
def data(ctx: Context) -> dict[str, Any]:
    from gmlm.data import load_dataset
    from gmlm.data.prepare import prepare_dataset

    files = data_files(ctx.cfg)  # their times before reading: a later change is one
    inputs = file_signature(files) if files is not None else None
    corpus = data_corpus(ctx.cfg, ctx.log)
    root = prepare_dataset(
        data_config(ctx.cfg), ctx.data_dir, progress=ctx.progress, log=ctx.log, corpus=corpus
    )
    stats = load_dataset(root).stats()
    summary: dict[str, Any] = {"pairs": {k: v.kept for k, v in stats.splits.items()}}
    missing = stand_in_missing(ctx.cfg)
    if missing:
        summary[STAND_IN] = missing
    if inputs is not None:
        summary[INPUTS] = inputs
    return summary


# --------------------------------------------------------------------------- training
DECODER_LAYERS = {"ar1": 1}
"""The decoder depth of the training stages whose names promise one (the evaluation labels
ar1's rows "AR 1-layer decoder")."""


def check_decoder_layers(name: str, layers: int, where: str) -> None:
    """Refuse a model for training stage `name` whose `layers` break DECODER_LAYERS;
    `where` names the setting that gave them."""
    wanted = DECODER_LAYERS.get(name)
    if wanted is not None and layers != wanted:
        raise GmlmError(
            f"{where}: a model with {layers} decoder layers, but the {name} stage is the AR "
            f"baseline with {wanted} (Kasai et al. 2021); leave model.n_decoder_layers at "
            f"{wanted} (preset small-ar1), or train other depths with `gmlm train`"
        )


def stage_train_config(ctx: Context, name: str, stage: TrainStage, data_dir: Path) -> TrainConfig:
    """The `gmlm train` config of training stage `name`: the run's machine settings (threads,
    train_precision), then the stage's preset and overrides, which win where they set the same
    key."""
    from gmlm.training.config import load_train_config

    overrides = [f"data={data_dir}", f"out={ctx.run_dir(name)}"]
    if ctx.cfg.threads > 0:
        overrides.append(f"threads={ctx.cfg.threads}")
    if ctx.cfg.train_precision in ("fp32", "bf16"):
        overrides.append(f"precision={ctx.cfg.train_precision}")
    cfg = load_train_config(stage.preset, [*overrides, *stage.overrides])
    given = f"{name}.preset={stage.preset}, {name}.overrides=[{','.join(stage.overrides)}]"
    check_decoder_layers(name, cfg.model.n_decoder_layers, given)
    own = any(item.split("=", 1)[0].strip() == "precision" for item in stage.overrides)
    if ctx.cfg.train_precision == "fastest" and not own:
        cfg.precision = fastest_precision(ctx, name, cfg)
    return cfg


FASTEST_STEPS = 3
"""Timed steps per precision for train_precision=fastest (after one untimed step each)."""
FASTEST_MARGIN = 1.1
"""bf16 is chosen when its median interleaved step rate is at least this multiple of fp32's:
within 10% the measurement cannot tell them apart, and fp32 is the exact one."""


def fastest_precision(ctx: Context, name: str, cfg: TrainConfig) -> Literal["fp32", "bf16"]:
    """fp32 or bf16, whichever trained stage `name`'s model faster on this machine just now
    (`gmlm throughput` on the stage's own config and data)."""
    from gmlm.provenance import cpu_model, torch_threads
    from gmlm.training.throughput import measure_throughput
    from gmlm.training.throughput_settings import ThroughputSettings

    ctx.log(f"  train_precision=fastest: timing fp32 and bf16 steps of the {name} model")
    timed = ThroughputSettings(steps=FASTEST_STEPS, warmup=1, precisions=("fp32", "bf16"))
    report = measure_throughput(copy.deepcopy(cfg), timed)
    speedup = report.speedup_median
    assert speedup is not None  # both precisions were timed
    choice: Literal["fp32", "bf16"] = "bf16" if speedup >= FASTEST_MARGIN else "fp32"
    ctx.log(
        f"  bf16 autocast trained at {speedup:.2f}x fp32's rate ({FASTEST_STEPS} interleaved "
        f"steps each, {cpu_model()}, {torch_threads()} threads): "
        f"{choice} (bf16 needs {FASTEST_MARGIN}x)"
    )
    return choice


def train_run(ctx: Context, name: str, stage: TrainStage, data_dir: Path) -> dict[str, Any]:
    from gmlm.training.trainer import Trainer

    if stage.checkpoint:
        return given_checkpoint(ctx, name, Path(stage.checkpoint))
    cfg = stage_train_config(ctx, name, stage, data_dir)
    result = Trainer(cfg, progress=ctx.progress, log=ctx.log).run()
    return {
        "step": result.step,
        "train_seconds": result.last_metrics.get("elapsed_s"),
        "best": _plain_best(result.best),
    }


def given_checkpoint(ctx: Context, name: str, path: Path) -> dict[str, Any]:
    """A training stage with a given checkpoint: check it is one of the stage's kind."""
    from gmlm.checkpoint.config import read_checkpoint_config
    from gmlm.checkpoint.fingerprint import checkpoint_fingerprint
    from gmlm.checkpoint.languages import check_languages, pair_of
    from gmlm.checkpoint.loading import resolve_checkpoint
    from gmlm.checkpoint.meta import Meta
    from gmlm.data.binarized import MANIFEST, read_manifest

    if not path.exists():
        raise GmlmError(
            f"{name}.checkpoint={path}: no such folder (a relative path is read from the "
            f"current folder, {Path.cwd()}); run from the repository root or give the full path"
        )
    folder = resolve_checkpoint(path)
    config = read_checkpoint_config(folder)
    kind = config.kind
    expected = "padir" if name == "padir" else "ar"
    if kind != expected:
        raise GmlmError(f"{name}.checkpoint={path}: holds a {kind} model, not {expected}")
    check_decoder_layers(name, config.model.n_decoder_layers, f"{name}.checkpoint={path}")
    if (ctx.data_dir / MANIFEST).is_file():
        wanted = pair_of(read_manifest(ctx.data_dir))
        if wanted is not None:  # the data stage's corpus: the checkpoint must translate it
            check_languages(
                f"{name}.checkpoint={path}",
                folder,
                wanted,
                "give the {wanted} checkpoints, or a data.corpus in the {pair} direction",
            )
    step = Meta.of(folder).step
    steps = "?" if step is None else step
    ctx.log(f"  using the given {kind} model {folder} (trained for {steps} steps)")
    return {
        "checkpoint": str(folder),
        "trained": False,
        "step": step,
        FINGERPRINT: checkpoint_fingerprint(folder),
    }


def _plain_best(best: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in best.items() if isinstance(v, (int, float, str))}


def teacher(ctx: Context) -> dict[str, Any]:
    if not ctx.cfg.distill.enabled:
        ctx.log("  distillation is off in this preset: no teacher to train")
        return {"skipped": "distill.enabled=false"}
    return train_run(ctx, "teacher", ctx.cfg.teacher, ctx.data_dir)


def distill(ctx: Context) -> dict[str, Any]:
    if not ctx.cfg.distill.enabled:
        ctx.log("  distillation is off in this preset: students train on the raw data")
        return {"skipped": "distill.enabled=false"}
    from gmlm.translation.distill import distill as run_distill

    d = ctx.cfg.distill
    run_distill(
        ctx.checkpoint("teacher"),
        ctx.data_dir,
        ctx.out / "distill",
        d,
        batch_size=d.batch_size,
        progress=ctx.progress,
        log=ctx.log,
    )
    return {"data": str(ctx.out / "distill")}


def ar(ctx: Context) -> dict[str, Any]:
    return train_run(ctx, "ar", ctx.cfg.ar, ctx.student_data_dir)


def ar1(ctx: Context) -> dict[str, Any]:
    if not ctx.cfg.ar1.enabled:
        ctx.log("  the 1-layer-decoder AR baseline is off in this preset (ar1.enabled=false)")
        return {"skipped": "ar1.enabled=false"}
    return train_run(ctx, "ar1", ctx.cfg.ar1, ctx.student_data_dir)


def padir(ctx: Context) -> dict[str, Any]:
    return train_run(ctx, "padir", ctx.cfg.padir, ctx.student_data_dir)


def tune(ctx: Context) -> dict[str, Any]:
    """The AR baseline distils the training sources again, and PaDIR is fine-tuned on them."""
    t = ctx.cfg.tune
    if not t.enabled:
        ctx.log("  PaDIR is not fine-tuned in this preset (tune.enabled=false)")
        return {"skipped": "tune.enabled=false"}
    from gmlm.translation.distill import distill as run_distill

    d = dataclasses.replace(ctx.cfg.distill, beam=t.beam)
    run_distill(
        ctx.checkpoint("ar"),
        ctx.data_dir,
        tune_data_dir(ctx.out),
        d,
        batch_size=d.batch_size,
        progress=ctx.progress,
        log=ctx.log,
    )
    return train_run(ctx, "tune", tune_train_stage(ctx.cfg, ctx.out), tune_data_dir(ctx.out))


def tune_data_dir(out: Path) -> Path:
    """Where the tune stage writes the AR baseline's translations of the training sources."""
    return out / "tune-distill"


def tune_train_stage(cfg: ReproduceConfig, out: Path) -> TrainStage:
    """The training run of the tune stage: the padir stage's checkpoint's own training config
    (a run's or a given checkpoint's), started from its weights, then tune.overrides."""
    from gmlm.checkpoint.files import CONFIG_FILE
    from gmlm.checkpoint.loading import resolve_checkpoint

    base = stage_checkpoint(cfg, out, "padir")
    config = resolve_checkpoint(base) / CONFIG_FILE
    return TrainStage(preset=str(config), overrides=[f"init_from={base}", *cfg.tune.overrides])


# ------------------------------------------------------------------------- calibrate
def calibrate(ctx: Context) -> dict[str, Any]:
    c = ctx.cfg.calibrate
    if not c.enabled:
        return {"skipped": "calibrate.enabled=false"}
    if ctx.stand_in:
        return {"skipped": needs_multi30k("the length calibration", ctx.stand_in)}
    from gmlm.analysis.calibration import calibrate
    from gmlm.analysis.results import CalibrationResult
    from gmlm.checkpoint.decoding_defaults import DECODING_FILE

    grids: list[tuple[str, str, list[Any], dict[str, Any]]] = [
        ("ar", "length_penalty", list(c.length_penalties), {"beam": c.ar_beam})
    ]
    if ctx.cfg.ar1.enabled:
        grids.append(("ar1", "length_penalty", list(c.length_penalties), {"beam": c.ar_beam}))
    grids.append(("padir", "length_shift", list(c.length_shifts), {}))
    models = {}
    for run, setting, values, decoding in grids:
        if given_as_is(ctx.cfg, run):
            ctx.log(f"  {run}: a given checkpoint, not calibrated (it has its own decoding.json)")
            continue
        ctx.log(f"  {run}: {setting} over {values} on {c.split}")
        earlier = ctx.checkpoint(run) / DECODING_FILE
        if earlier.is_file():
            # The stage's own output (the checkpoint was trained in this run) from before an
            # interruption or a --redo, maybe with other settings: chosen again, from scratch.
            ctx.log(f"  {run}: {earlier} holds an earlier calibration's choice: choosing again")
            earlier.unlink()
        models[run] = calibrate(
            ctx.checkpoint(run),
            ctx.data_dir,
            c.split,
            setting=setting,
            values=values,
            decoding=decoding,
            min_gain=c.min_gain,
            sentences=c.sentences or None,
            batch_size=c.batch_size,
            progress=ctx.progress,
            log=ctx.log,
        )
    CalibrationResult(models=models).write(ctx.out / "calibrate" / "calibrate.json")
    return {run: {m.setting: m.chosen} for run, m in models.items()}


# --------------------------------------------------------------------------- compare
def compare(ctx: Context) -> dict[str, Any]:
    c = ctx.cfg.compare
    if not c.enabled:
        return {"skipped": "compare.enabled=false"}
    if ctx.stand_in:
        return {"skipped": needs_multi30k("the comparison", ctx.stand_in)}
    from gmlm.analysis.comparison import compare_checkpoints
    from gmlm.checkpoint.fingerprint import checkpoint_fingerprint
    from gmlm.checkpoint.loading import resolve_checkpoint

    # Before comparing: a checkpoint replaced meanwhile then makes the next run compare again.
    digests = {path: checkpoint_fingerprint(resolve_checkpoint(path)) for path in c.against}
    result = compare_checkpoints(
        [*c.against, ctx.checkpoint("padir")],
        ctx.data_dir,
        c.split,
        sentences=c.sentences or None,
        batch_size=c.batch_size,
        log=ctx.log,
    )
    result.write(ctx.out / "compare" / "compare.json")
    first, run = result.rows[0], result.rows[-1]
    return {
        "bleu": run.quality.bleu,
        "against": first.quality.bleu,
        "p_value": run.p_value,
        FINGERPRINTS: digests,
    }


# -------------------------------------------------------------------------- ablation
def ablation(ctx: Context) -> dict[str, Any]:
    b = ctx.cfg.ablation
    if not b.enabled:
        return {"skipped": "ablation.enabled=false"}
    if ctx.stand_in:
        return {"skipped": needs_multi30k("the decoding ablation", ctx.stand_in)}
    from gmlm.analysis.ablation import best_row, decoding_ablation

    result = decoding_ablation(
        ctx.checkpoint("padir"),
        ctx.data_dir,
        b.split,
        variants=tuple(b.variants),
        sentences=b.sentences or None,
        batch_size=b.batch_size,
        progress=ctx.progress,
        log=ctx.log,
    )
    result.write(ctx.out / "ablation" / "ablation.json")
    best = best_row(result)
    return {"default_bleu": result.rows[0].quality.bleu, "best": best.variant}


# ------------------------------------------------------------------------- evaluation
@dataclass(frozen=True)
class System:
    key: str  # file-name friendly: ar-beam5, padir-T4-B5
    label: str  # for tables
    run: str  # run folder name under OUT
    beam: int | None = None  # AR
    steps: int | None = None  # PaDIR
    length_beam: int | None = None  # PaDIR

    @property
    def settings(self) -> dict[str, int]:
        """The decoding settings, as `Translator.translate` takes them."""
        found = {"beam": self.beam, "steps": self.steps, "length_beam": self.length_beam}
        return {name: value for name, value in found.items() if value is not None}


def systems(cfg: ReproduceConfig) -> list[System]:
    """Every system the evaluation scores, in table order."""
    e = cfg.evaluate
    found: list[System] = []
    students = " (distilled)" if cfg.distill.enabled else ""
    ar_runs = [("teacher", "AR teacher (raw data)")] if cfg.distill.enabled else []
    ar_runs.append(("ar", f"AR{students}"))
    if cfg.ar1.enabled:
        ar_runs.append(("ar1", f"AR 1-layer decoder{students}"))
    for run, label in ar_runs:
        for beam in e.ar_beams:
            kind = "greedy" if beam == 1 else f"beam {beam}"
            found.append(System(f"{run}-beam{beam}", f"{label}, {kind}", run, beam=beam))
    for b in e.length_beams:
        for t in e.padir_steps:
            found.append(
                System(
                    f"padir-T{t}-B{b}",
                    f"PaDIR T={t} B={b}",
                    "padir",
                    steps=t,
                    length_beam=b,
                )
            )
    return found


def translate(
    ctx: Context, translators: dict[str, Any], system: System, sources: list[str]
) -> list[str]:
    """`system`'s translations of `sources` as the evaluation decodes them; `translators`
    caches the loaded models by run name."""
    import gmlm

    if system.run not in translators:
        translators[system.run] = gmlm.load(ctx.checkpoint(system.run))
    e = ctx.cfg.evaluate
    return translators[system.run].translate(
        sources,
        batch_size=e.batch_size,
        precision="bf16" if e.bf16 else "fp32",
        on_over_length="split",
        **system.settings,
    )


def evaluate(ctx: Context) -> dict[str, Any]:
    from gmlm.checkpoint.fingerprint import checkpoint_fingerprint
    from gmlm.checkpoint.loading import resolve_checkpoint
    from gmlm.data import load_dataset
    from gmlm.evaluation.bleu import default_tokenizer
    from gmlm.evaluation.results import EvaluationScores, SystemScores
    from gmlm.evaluation.stutter import repeat_report, stutter_report
    from gmlm.evaluation.summary import Signatures, quality_row

    e = ctx.cfg.evaluate
    if ctx.stand_in:
        return examples(ctx, ctx.stand_in)
    prepared = load_dataset(ctx.data_dir)
    if e.split not in prepared.splits:
        raise GmlmError(f"split {e.split!r} not in {ctx.data_dir}; it has {prepared.splits}")
    sources = prepared.read_text(e.split, "src")
    references = prepared.read_text(e.split, "tgt")
    in_split = len(references)
    if e.sentences > 0:
        sources, references = sources[: e.sentences], references[: e.sentences]
    tokenize = default_tokenizer(prepared.stats().tgt_lang)
    folder = ctx.out / "eval"
    make_dirs(folder, f"cannot write {folder}")
    (folder / "examples.json").unlink(missing_ok=True)  # of a run before the test set came
    atomic_write_text(folder / "reference.txt", "".join(r + "\n" for r in references))
    rows: list[SystemScores] = []
    signatures: Signatures | None = None
    translators: dict[str, Any] = {}
    digest = sources_digest(sources)
    fingerprints: dict[str, str] = {}
    for system in systems(ctx.cfg):
        if system.run not in fingerprints:
            fingerprints[system.run] = checkpoint_fingerprint(
                resolve_checkpoint(ctx.checkpoint(system.run))
            )
        made_with = MadeWith(
            split=e.split,
            sentences=len(sources),
            sources_sha256=digest,
            checkpoint=fingerprints[system.run],
            precision="bf16" if e.bf16 else "fp32",
            batch_size=e.batch_size,
            decoding=system.settings,
        )
        seconds = None
        hyps, stale = saved_translations(folder, system.key, made_with)
        if hyps is None:
            if stale:
                ctx.log(f"  {system.label}: {stale}: translating again")
            start = time.perf_counter()
            hyps = translate(ctx, translators, system, sources)
            seconds = time.perf_counter() - start
            save_translations(folder, system.key, made_with, hyps)
        quality, signatures = quality_row(hyps, references, tokenize)
        rows.append(
            SystemScores(
                system=system.key,
                label=system.label,
                run=system.run,
                beam=system.beam,
                steps=system.steps,
                length_beam=system.length_beam,
                quality=quality,
                decode_seconds=seconds,
            )
        )
        ctx.log(
            f"  {system.label:32s} BLEU {quality.bleu:6.2f}  chrF {quality.chrf:6.2f}  "
            f"stutter/100w {quality.stutter_per_100_words:.3f}"
        )
    assert signatures is not None, "systems() always gives systems to score"
    control = stutter_report(references, references, tokenize)
    EvaluationScores(
        split=e.split,
        sentences=len(references),
        split_sentences=in_split if in_split > len(references) else None,
        tokenize=tokenize,
        signatures=signatures,
        reference_repeats_per_100_words=round(control.reference_repeats_per_100_words, 3),
        reference_ngram_repeats=repeat_report(references, tokenize).rounded(),
        precision="bf16" if e.bf16 else "fp32",
        systems=tuple(rows),
    ).write(folder / "scores.json")
    return {r.system: r.quality.bleu for r in rows}


def examples(ctx: Context, reason: str) -> dict[str, Any]:
    """Without the test set: every system's translations of the example sentences, for the
    report to show (eval/examples.json); no scores."""
    from gmlm.data import load_dataset

    dataset = load_dataset(ctx.data_dir)
    sources = dataset.read_text(ctx.cfg.evaluate.split, "src")
    translators: dict[str, Any] = {}
    found = systems(ctx.cfg)
    result = ExampleTranslations(
        sources=tuple(sources),
        source_lang=str(dataset.manifest.get("src_lang") or "de"),
        labels={s.key: s.label for s in found},
        translations={s.key: tuple(translate(ctx, translators, s, sources)) for s in found},
        stand_in=reason,
    )
    result.write(ctx.out / "eval" / "examples.json")
    ctx.log(f"  translated {len(sources)} example sentences with {len(found)} systems")
    return {"skipped": needs_multi30k("scoring quality", reason)}


# --------------------------------------------------------------------------- bench
def bench(ctx: Context) -> dict[str, Any]:
    b = ctx.cfg.bench
    if not b.enabled:
        return {"skipped": "bench.enabled=false"}
    from gmlm.bench import run_bench

    result = run_bench(
        ctx.checkpoint("ar"),
        ctx.checkpoint("padir"),
        ctx.data_dir,
        b,
        teacher=ctx.checkpoint("teacher") if ctx.cfg.distill.enabled else None,
        ar1=ctx.checkpoint("ar1") if ctx.cfg.ar1.enabled else None,
        json_out=ctx.out / "bench" / "bench.json",
        progress=ctx.progress,
        log=ctx.log,
    )
    return {"systems": len(result.systems)}


# ----------------------------------------------------------------------- attention
def attention(ctx: Context) -> dict[str, Any]:
    a = ctx.cfg.attention
    if not a.enabled:
        return {"skipped": "attention.enabled=false"}
    if ctx.stand_in:
        return {"skipped": needs_multi30k("the attention analysis", ctx.stand_in)}
    from gmlm.analysis.attention import attention_analysis

    result = attention_analysis(
        ctx.checkpoint("padir"),
        ctx.data_dir,
        a.split,
        sentences=a.sentences or None,
        batch_size=a.batch_size,
        steps=a.steps,
        length_beam=a.length_beam,
        stutter_remask=a.stutter_remask,
        progress=ctx.progress,
    )
    result.write(ctx.out / "attention" / "attention.json")
    return {"pairs": result.pairs}


# -------------------------------------------------------------------------- length
def length(ctx: Context) -> dict[str, Any]:
    g = ctx.cfg.length
    if not g.enabled:
        return {"skipped": "length.enabled=false"}
    if ctx.stand_in:
        return {"skipped": needs_multi30k("the length analysis", ctx.stand_in)}
    from gmlm.analysis.length import length_analysis

    result = length_analysis(
        ctx.checkpoint("padir"),
        ctx.data_dir,
        g.split,
        sentences=g.sentences or None,
        length_weights=tuple(g.length_weights),
        batch_size=g.batch_size,
        progress=ctx.progress,
        steps=g.steps,
        length_beam=g.length_beam,
    )
    result.write(ctx.out / "length" / "length.json")
    return {"top1_exact": result.predictor.top1_exact}


# ------------------------------------------------------------------- train_ablation
def train_ablation(ctx: Context) -> dict[str, Any]:
    t = ctx.cfg.train_ablation
    if not t.enabled:
        return {"skipped": "train_ablation.enabled=false"}
    if ctx.cfg.padir.checkpoint:
        return {"skipped": "padir.checkpoint is given: no PaDIR training run to compare with"}
    from gmlm.reproduce.train_ablation import (
        TrainAblationResult,
        row_at,
        slug,
        variant_overrides,
    )
    from gmlm.training.checkpoint import read_config
    from gmlm.training.trainer import Trainer

    main = read_config(ctx.run_dir("padir"))
    if main.optim.schedule == "cosine":
        raise GmlmError(
            "train_ablation: the padir run's learning-rate schedule is cosine, which max_steps "
            "shapes, so a shorter run is not the main run's start; use another schedule"
        )
    if t.steps < 1 or t.steps % main.valid_every:
        raise GmlmError(
            f"train_ablation.steps={t.steps}: give a positive multiple of the padir run's "
            f"valid_every ({main.valid_every}), where it validated"
        )
    # The variants train in the precision the padir run trained in up to the compared step
    # (not one measured again now, possibly on another CPU), so that precision is no difference.
    baseline = row_at(ctx.run_dir("padir"), t.steps, "", ())  # fails before training
    precision = baseline.precision
    rows = []
    for variant in t.variants:
        overrides = variant_overrides(variant)
        name = f"train_ablation/{slug(variant)}"
        stage = TrainStage(
            preset=ctx.cfg.padir.preset,
            overrides=[
                *([f"precision={precision}"] if precision else []),
                *ctx.cfg.padir.overrides,
                *overrides,
                f"max_steps={t.steps}",
                "keep_history=0",
                "average_last=0",
            ],
        )
        ctx.log(f"  {variant}: {t.steps} steps into {ctx.run_dir(name)}")
        cfg = stage_train_config(ctx, name, stage, ctx.student_data_dir)
        Trainer(cfg, progress=ctx.progress, log=ctx.log).run()
        row = row_at(ctx.run_dir(name), t.steps, variant, overrides)
        rows.append(row)
        ctx.log(f"  {variant}: validation BLEU {row.bleu} (padir run: {baseline.bleu})")
    result = TrainAblationResult(steps=t.steps, baseline=baseline, rows=tuple(rows))
    result.write(ctx.out / "train_ablation" / "train_ablation.json")
    return {"steps": t.steps, "bleu": {r.variant: r.bleu for r in rows}}


# -------------------------------------------------------------------------- report
def report(ctx: Context) -> dict[str, Any]:
    from gmlm.reproduce.report import write_report

    path = write_report(ctx.cfg, ctx.out)
    ctx.log(f"  wrote {path}")
    return {"report": str(path)}
