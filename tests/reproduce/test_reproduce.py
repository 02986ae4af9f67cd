"""The reproduction pipeline: errors, resumption, and a whole run on a synthetic corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import gmlm
from gmlm.analysis.results import CalibrationResult
from gmlm.bench.settings import BenchSettings
from gmlm.config import ConfigError, to_dict
from gmlm.decoding.options import parse_variant
from gmlm.errors import GmlmError
from gmlm.evaluation.summary import quality_row
from gmlm.reproduce.config import STAGE, STAGES, load_reproduce_config, parse_stages
from gmlm.reproduce.pipeline import check_run_folder, run_reproduce
from gmlm.reproduce.publish import NOTES_MARKER, publish_report
from gmlm.reproduce.sections import AR_BLEU_FLOOR
from gmlm.reproduce.stage_record import StageRecord
from gmlm.reproduce.stages import Context, stage_train_config
from tests.helpers.reproduce_runs import CALIBRATE, quick


def test_unknown_preset_stage_and_key():
    with pytest.raises(ConfigError, match=r"unknown reproduce preset 'nope'.*laptop"):
        load_reproduce_config("nope")
    with pytest.raises(ConfigError, match=r"unknown stage.*train.*the stages are theory"):
        parse_stages("theory,train")
    with pytest.raises(ConfigError, match="bogus"):
        load_reproduce_config("smoke", ["evaluate.bogus=1"])
    assert parse_stages("report,theory") == ["theory", "report"]
    assert parse_stages(None) == list(STAGES)


@pytest.mark.parametrize(
    "name",
    [
        "smoke",
        "demo",
        "demo-en-de",
        "bible-tiny",
        "laptop",
        "multi30k",
        "multi30k-en-de",
        "multi30k-ablation",
        "paper",
    ],
)
def test_presets_resolve(name):
    cfg = load_reproduce_config(name)
    assert cfg.preset == name and cfg.description
    from gmlm.training.config import load_train_config

    for stage in (cfg.teacher, cfg.ar, cfg.ar1, cfg.padir):
        load_train_config(stage.preset, ["data=x", "out=y", *stage.overrides]).validate()
    # The deep-encoder / shallow-decoder AR baseline: only in the multi30k runs, and 6 + 1 layers.
    assert cfg.ar1.enabled == (name in ("multi30k", "multi30k-en-de"))
    ar1 = load_train_config(cfg.ar1.preset, ["data=x", "out=y", *cfg.ar1.overrides])
    ar = load_train_config(cfg.ar.preset, ["data=x", "out=y", *cfg.ar.overrides])
    assert (ar1.kind, ar1.model.n_encoder_layers, ar1.model.n_decoder_layers) == ("ar", 6, 1)
    if cfg.ar1.enabled:  # the AR recipe but for the decoder's depth
        ar1.model.n_decoder_layers = ar.model.n_decoder_layers
        assert to_dict(ar1) == to_dict(ar)
    # The decoding ablation on validation data: in the parity runs, before their evaluation.
    assert cfg.ablation.enabled == (name in ("multi30k", "multi30k-en-de"))
    assert cfg.ablation.split == "valid" and all(map(parse_variant, cfg.ablation.variants))
    if name == "multi30k":  # the length analysis as the laptop run's, for comparison
        assert cfg.length.enabled and cfg.length.length_weights == (0.0, 0.5, 1.0)


def test_the_en_de_preset_is_the_multi30k_recipe_in_the_other_direction():
    de_en, en_de = load_reproduce_config("multi30k"), load_reproduce_config("multi30k-en-de")
    assert en_de.data.corpus == de_en.data.corpus + ":en-de"
    for name in ("teacher", "ar", "ar1", "padir", "distill", "calibrate", "ablation", "evaluate"):
        assert getattr(en_de, name) == getattr(de_en, name), name
    assert en_de.bench == de_en.bench and not en_de.train_ablation.enabled
    assert (en_de.targets.bleu_gap, en_de.targets.stutter_ratio, en_de.targets.more_steps) == (
        1.0,
        1.0,
        True,
    )


def test_a_users_preset_file_builds_on_a_shipped_preset_by_name(tmp_path):
    """A preset file outside the package names a shipped reproduce preset as its base by name
    (a sibling file of that name would come first); a name no folder has is refused, listing
    the reproduce presets."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("base: multi30k-en-de\nar1: {enabled: false}\n", encoding="utf-8")
    cfg = load_reproduce_config(str(mine))
    assert cfg.data.corpus == load_reproduce_config("multi30k-en-de").data.corpus
    assert not cfg.ar1.enabled
    mine.write_text("base: small-padir\n", encoding="utf-8")  # a training preset: not a base
    with pytest.raises(ConfigError, match=r"unknown preset 'small-padir'.*multi30k-en-de"):
        load_reproduce_config(str(mine))


def test_the_ablation_preset_is_the_multi30k_recipe_stopped_at_the_compared_step():
    """The baseline of `multi30k-ablation` must be the first steps of the multi30k run: the
    same teacher, distillation, variants and PaDIR settings but for max_steps, which the
    inverse-sqrt schedule does not read."""
    full, ablation = load_reproduce_config("multi30k"), load_reproduce_config("multi30k-ablation")
    for name in ("data", "teacher", "distill", "train_ablation", "train_precision", "checkpoint"):
        assert getattr(ablation, name) == getattr(full, name), name
    step = ablation.train_ablation.steps
    assert ablation.padir.overrides == [
        f"max_steps={step}" if item.startswith("max_steps=") else item
        for item in full.padir.overrides
    ]
    assert "optim.schedule=inverse_sqrt" in ablation.padir.overrides
    assert len(ablation.train_ablation.variants) == 5


def test_train_precision_reaches_every_training_stage_and_a_stage_may_override_it(tmp_path):
    cfg = load_reproduce_config("multi30k", ["threads=1", "train_precision=bf16"])
    cfg.ar.overrides = [*cfg.ar.overrides, "precision=fp32"]
    ctx = Context(cfg, tmp_path, progress=False, log=lambda _m: None)
    got = {
        name: stage_train_config(ctx, name, getattr(cfg, name), tmp_path / "data")
        for name in ("teacher", "ar", "ar1", "padir")
    }
    assert {name: c.precision for name, c in got.items()} == {
        "teacher": "bf16",
        "ar": "fp32",  # the stage's own override wins
        "ar1": "bf16",
        "padir": "bf16",
    }
    assert all(c.threads == 1 and c.out == str(tmp_path / n) for n, c in got.items())
    unset = load_reproduce_config("multi30k")
    assert unset.train_precision == "fastest"  # the preset's: measured per stage (below)
    unset.train_precision = ""
    ctx = Context(unset, tmp_path, progress=False, log=lambda _m: None)
    # Unset: the trainer's default, fp32 on a CPU.
    assert stage_train_config(ctx, "padir", unset.padir, tmp_path / "data").precision == "auto"
    with pytest.raises(ConfigError, match="train_precision"):
        load_reproduce_config("multi30k", ["train_precision=fp16"])


@pytest.mark.parametrize(("speedup", "chosen"), [(1.53, "bf16"), (1.1, "bf16"), (1.09, "fp32")])
def test_train_precision_fastest_follows_the_measured_speedup(
    tmp_path, monkeypatch, speedup, chosen
):
    from gmlm.reproduce import stages
    from gmlm.training import throughput

    timed = []

    def fake_measure(cfg, settings):
        timed.append(
            (cfg.kind, cfg.model.n_decoder_layers, cfg.out, settings.steps, settings.precisions)
        )
        return throughput.ThroughputReport({"cpu": "c", "threads": 1}, {}, speedup, {})

    monkeypatch.setattr(throughput, "measure_throughput", fake_measure)
    cfg = load_reproduce_config("multi30k", ["train_precision=fastest"])
    cfg.teacher.overrides = [*cfg.teacher.overrides, "precision = fp32"]
    messages: list[str] = []
    ctx = Context(cfg, tmp_path, progress=False, log=messages.append)
    got = stage_train_config(ctx, "ar1", cfg.ar1, tmp_path / "data")
    assert got.precision == chosen
    assert timed == [("ar", 1, str(tmp_path / "ar1"), stages.FASTEST_STEPS, ("fp32", "bf16"))]
    assert f"{speedup:.2f}x fp32's rate" in messages[-1] and messages[-1].split(": ")[-1][:4] == (
        chosen
    )
    # A stage that sets its own precision is not measured.
    assert stage_train_config(ctx, "teacher", cfg.teacher, tmp_path / "data").precision == "fp32"
    assert len(timed) == 1


def test_train_precision_fastest_measures_the_stage_model(word_task_data, tmp_path):
    cfg = load_reproduce_config("smoke", ["threads=1", "train_precision=fastest"])
    cfg.ar.overrides = [*cfg.ar.overrides, "max_tokens=256"]
    messages: list[str] = []
    ctx = Context(cfg, tmp_path, progress=False, log=messages.append)
    got = stage_train_config(ctx, "ar", cfg.ar, word_task_data)
    assert got.precision in ("fp32", "bf16")
    assert re.search(
        r"bf16 autocast trained at [0-9.]+x fp32's rate .*: (fp32|bf16) ", messages[-1]
    )
    assert got.max_tokens == 256 and got.model.vocab_size == 0  # the measurement's copy only


def test_refuses_a_folder_of_another_preset_or_config(tmp_path):
    out = tmp_path / "run"
    cfg = load_reproduce_config("smoke", ["theory.enabled=false"])
    run_reproduce(cfg, out, ["theory"], progress=False, log=lambda _m: None)
    assert json.loads((out / "stages" / "theory.json").read_text())["summary"]["skipped"]
    other = load_reproduce_config("bible-tiny", ["theory.enabled=false"])
    with pytest.raises(
        GmlmError, match=r"holds a run of preset 'smoke' \(this is 'bible-tiny'\).*ar.overrides"
    ):
        run_reproduce(other, out, ["theory"], progress=False, log=lambda _m: None)
    # A changed thread count or training precision is not a different run: both follow the
    # machine, and a run may move between machines (even once its training has started).
    same = load_reproduce_config("smoke", ["theory.enabled=false", "threads=1"])
    run_reproduce(same, out, ["theory"], progress=False, log=lambda _m: None)
    (out / "teacher").mkdir()
    moved = load_reproduce_config("smoke", ["theory.enabled=false", "train_precision=bf16"])
    run_reproduce(moved, out, ["theory"], progress=False, log=lambda _m: None)
    # Nor are other targets: they change the report's verdicts, not what a stage computes.
    aimed = load_reproduce_config("smoke", ["theory.enabled=false", "targets.speedup_p99=3"])
    run_reproduce(aimed, out, ["theory"], progress=False, log=lambda _m: None)
    (out / "teacher").rmdir()
    # A setting added to the schema since the run started (saved file lacks it) is its default.
    saved = (out / "reproduce.yaml").read_text()
    (out / "reproduce.yaml").write_text(saved.replace("  sentences: 0\n  ar_beams", "  ar_beams"))
    assert "sentences: 0\n  ar_beams" not in (out / "reproduce.yaml").read_text()
    run_reproduce(same, out, ["theory"], progress=False, log=lambda _m: None)
    # The same preset, revised: a stage that has not started may change, a started one not.
    revised = load_reproduce_config("smoke", ["theory.enabled=false", "padir.overrides=[x=1]"])
    run_reproduce(revised, out, ["theory"], progress=False, log=lambda _m: None)
    assert "x=1" in (out / "reproduce.yaml").read_text()
    (out / "padir").mkdir()
    with pytest.raises(GmlmError, match=r"different settings \(padir.overrides\)"):
        run_reproduce(same, out, ["theory"], progress=False, log=lambda _m: None)
    changed_theory = load_reproduce_config(
        "smoke", ["theory.enabled=true", "padir.overrides=[x=1]"]
    )
    with pytest.raises(GmlmError, match=r"different settings \(theory.enabled\)"):
        run_reproduce(changed_theory, out, ["theory"], progress=False, log=lambda _m: None)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file.txt").write_text("x")
    with pytest.raises(GmlmError, match="not a reproduction run"):
        run_reproduce(cfg, tmp_path / "junk", ["theory"], progress=False, log=lambda _m: None)


def test_a_started_stage_may_change_max_steps_only_under_a_schedule_that_ignores_it(tmp_path):
    out = tmp_path / "run"
    base = ["theory.enabled=false"]

    def with_padir(*overrides: str):
        return load_reproduce_config("smoke", [*base, f"padir.overrides=[{','.join(overrides)}]"])

    run_reproduce(
        with_padir("optim.schedule=inverse_sqrt", "max_steps=10"),
        out,
        ["theory"],
        progress=False,
        log=lambda _m: None,
    )
    (out / "padir").mkdir()  # the stage has started
    longer = with_padir("optim.schedule=inverse_sqrt", "max_steps=30")
    run_reproduce(longer, out, ["theory"], progress=False, log=lambda _m: None)
    assert "max_steps=30" in (out / "reproduce.yaml").read_text()
    # Any other change stays refused,
    refused = with_padir("optim.schedule=inverse_sqrt", "max_steps=30", "optim.lr=0.1")
    with pytest.raises(GmlmError, match=r"different settings \(padir.overrides\)"):
        run_reproduce(refused, out, ["theory"], progress=False, log=lambda _m: None)
    # and so does max_steps under the cosine schedule it shapes.
    cosine = tmp_path / "cosine"
    run_reproduce(
        with_padir("optim.schedule=cosine", "max_steps=10"),
        cosine,
        ["theory"],
        progress=False,
        log=lambda _m: None,
    )
    (cosine / "padir").mkdir()
    with pytest.raises(GmlmError, match=r"different settings \(padir.overrides\)"):
        run_reproduce(
            with_padir("optim.schedule=cosine", "max_steps=30"),
            cosine,
            ["theory"],
            progress=False,
            log=lambda _m: None,
        )


def saved_before_ar1(out: Path, done: tuple[str, ...], stages: tuple[str, ...] = ("ar1",)) -> None:
    """A run folder of the multi30k preset as a gmlm without the `stages` left it: its
    reproduce.yaml lacks their sections, the stages `done` have finished, the teacher has
    started (like the run in /work/runs/multi30k)."""
    saved = to_dict(load_reproduce_config("multi30k"))
    for stage in stages:
        del saved[stage], saved["expected_seconds"][stage]
    out.mkdir()
    (out / "reproduce.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    (out / "teacher").mkdir()
    for name in done:
        StageRecord(
            stage=name, seconds=1.0, finished="2026-01-01T00:00:00", host="h", summary={}
        ).write(out / "stages" / f"{name}.json")


def test_a_run_saved_before_the_ar1_stage_resumes_with_it_switched_on(tmp_path):
    out = tmp_path / "multi30k"
    saved_before_ar1(out, ("theory", "data"))
    cfg = load_reproduce_config("multi30k")
    assert cfg.ar1.enabled  # a changed setting of a stage that has not started
    check_run_folder(cfg, out)
    cfg.threads = 1  # only threads: run_reproduce resumes without running a stage (theory is done)
    run_reproduce(cfg, out, ["theory"], progress=False, log=lambda _m: None)
    assert load_reproduce_config(str(out / "reproduce.yaml")).ar1 == cfg.ar1
    # Once the ar1 stage has started, its settings are those of its run.
    (out / "ar1").mkdir()
    changed = load_reproduce_config("multi30k", ["ar1.overrides=[max_steps=3000,optim.lr=0.1]"])
    with pytest.raises(GmlmError, match=r"different settings \(ar1.overrides\)"):
        check_run_folder(changed, out)
    off = load_reproduce_config("multi30k", ["ar1.enabled=false"])
    with pytest.raises(GmlmError, match=r"different settings \(ar1.enabled\)"):
        check_run_folder(off, out)
    check_run_folder(cfg, out)


def test_a_run_saved_before_the_ablation_stage_resumes_with_it(tmp_path):
    out = tmp_path / "multi30k"
    saved_before_ar1(out, ("theory", "data"), ("ablation",))
    cfg = load_reproduce_config("multi30k")
    assert cfg.ablation.enabled
    cfg.threads = 1
    run_reproduce(cfg, out, ["theory"], progress=False, log=lambda _m: None)
    assert load_reproduce_config(str(out / "reproduce.yaml")).ablation == cfg.ablation


@pytest.mark.parametrize(("bf16", "precision"), [(None, "auto"), (True, "bf16"), (False, "fp32")])
def test_a_run_saved_with_distill_bf16_resumes_with_its_precision(tmp_path, bf16, precision):
    """distill.bf16, which every run's reproduce.yaml held before distill.precision replaced
    it, reads as that precision: a started distillation resumes with the same settings."""
    out = tmp_path / "multi30k"
    saved_before_ar1(out, ("theory", "data", "teacher"), ())
    saved = yaml.safe_load((out / "reproduce.yaml").read_text())
    del saved["distill"]["precision"], saved["distill"]["threads"]
    del saved["distill"]["chunk_sentences"]
    saved["distill"]["bf16"] = bf16
    (out / "reproduce.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    (out / "distill").mkdir()
    resumed = load_reproduce_config(str(out / "reproduce.yaml"))
    assert resumed.distill.precision == precision
    check_run_folder(load_reproduce_config("multi30k", [f"distill.precision={precision}"]), out)
    other = "fp32" if precision != "fp32" else "bf16"
    with pytest.raises(GmlmError, match=r"different settings \(distill.precision\)"):
        check_run_folder(load_reproduce_config("multi30k", [f"distill.precision={other}"]), out)
    with pytest.raises(ConfigError, match=r"unknown config key 'distill\.bf16'"):
        load_reproduce_config("multi30k", ["distill.bf16=true"])  # only saved files are read so


def test_a_bad_ablation_variant_fails_before_the_first_stage(tmp_path):
    cfg = load_reproduce_config("smoke", ["ablation.enabled=true", "ablation.variants=[steps=0x]"])
    with pytest.raises(GmlmError, match=r"ablation.variants: decoding variant 'steps=0x': steps"):
        run_reproduce(cfg, tmp_path / "run", progress=False, log=lambda _m: None)
    assert not (tmp_path / "run" / "stages").exists()  # no stage ran
    cfg = load_reproduce_config("smoke", ["ablation.enabled=true", "ablation.variants=[]"])
    with pytest.raises(GmlmError, match=r"ablation.variants is empty"):
        run_reproduce(cfg, tmp_path / "run", progress=False, log=lambda _m: None)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "teacher.preset=nope-ar",
            r"^the teacher stage \(teacher.preset=nope-ar\): unknown preset",
        ),
        ("padir.overrides=[model.nope=1]", r"^the padir stage .*unknown config key 'model.nope'"),
    ],
)
def test_a_bad_training_stage_fails_before_the_first_stage(tmp_path, override, message):
    cfg = load_reproduce_config("smoke", [override])
    with pytest.raises(GmlmError, match=message):
        run_reproduce(cfg, tmp_path / "run", progress=False, log=lambda _m: None)
    assert not (tmp_path / "run" / "stages").exists()  # no stage ran


def test_ar1_is_not_switched_on_after_the_stages_that_read_it_finished(tmp_path):
    """A run that evaluated before the ar1 stage existed: switching it on would train it and
    leave it out of the evaluation, so it is refused with what to remove to redo them."""
    out = tmp_path / "multi30k"
    done = ("theory", "data", "teacher", "distill", "ar", "padir", "evaluate", "bench", "report")
    saved_before_ar1(out, done)
    cfg = load_reproduce_config("multi30k")
    records = ", ".join(str(out / "stages" / f"{n}.json") for n in ("evaluate", "bench", "report"))
    message = (
        r"different settings \(ar1.enabled, ar1.overrides\).*Stage ar1 has not run, but "
        rf"evaluate, bench finished without it: to run it and redo evaluate, bench, report, "
        rf"remove {re.escape(records)} and rerun"
    )
    with pytest.raises(GmlmError, match=message):
        check_run_folder(cfg, out)
    check_run_folder(load_reproduce_config("multi30k", ["ar1.enabled=false"]), out)
    for name in ("evaluate", "bench", "report"):
        (out / "stages" / f"{name}.json").unlink()
    check_run_folder(cfg, out)


def test_stage_needs_its_inputs(tmp_path):
    cfg = load_reproduce_config("smoke")
    with pytest.raises(GmlmError, match="stage 'teacher' needs stage\\(s\\) data first"):
        run_reproduce(cfg, tmp_path / "run", ["teacher"], progress=False, log=lambda _m: None)
    with pytest.raises(GmlmError, match=r"--redo padir: not among the stages to run .*add it"):
        run_reproduce(cfg, tmp_path / "other", ["report"], redo=["padir"], progress=False)
    assert not (tmp_path / "other").exists()


# The ar1 stage switched on: a 1-layer-decoder AR student beside the others.
AR1 = [
    "ar1.enabled=true",
    "ar1.preset=tiny-ar",
    "ar1.overrides=[model.n_decoder_layers=1,max_steps=20,valid_every=20,valid_sentences=0]",
]


# The decoding ablation switched on, on a few validation sentences.
ABLATION = ["ablation.enabled=true", "ablation.sentences=8", "ablation.variants=[selection=sum]"]


def test_whole_pipeline_on_a_synthetic_corpus(corpus, tmp_path, monkeypatch):
    out = tmp_path / "run"
    cfg = load_reproduce_config("smoke", quick(corpus, *AR1, *ABLATION, *CALIBRATE))
    messages: list[str] = []
    run_reproduce(cfg, out, progress=False, log=messages.append)
    for stage in STAGES:
        assert (out / "stages" / f"{stage}.json").is_file(), stage
    scores = json.loads((out / "eval" / "scores.json").read_text())
    keys = [r["system"] for r in scores["systems"]]
    assert keys == [
        "teacher-beam1",
        "teacher-beam5",
        "ar-beam1",
        "ar-beam5",
        "ar1-beam1",
        "ar1-beam5",
        "padir-T1-B1",
        "padir-T4-B1",
        "padir-T1-B5",
        "padir-T4-B5",
    ]
    assert StageRecord.read(out / "stages" / "ar1.json").summary["step"] == 20
    references = (out / "eval" / "reference.txt").read_text().splitlines()
    for key in keys:
        assert len((out / "eval" / f"{key}.txt").read_text().splitlines()) == len(references)
    report = (out / "REPORT.md").read_text()
    for heading in (
        "Targets",
        "Translation quality",
        "Stutter",
        "Speed",
        "Decoding ablation (validation)",
        "Attention analysis",
        "Training",
        "Theory",
        "Time per stage",
        "Resolved configuration",
    ):
        assert f"## {heading}" in report, heading
    assert (out / "figures" / "bleu_vs_steps.png").is_file()
    training = report.split("## Training")[1].split("\n## ")[0]
    metrics = (out / "teacher" / "metrics.jsonl").read_text().splitlines()
    teacher = [json.loads(line) for line in metrics if "valid_loss" in line]
    assert [r["step"] for r in teacher] == [20, 40]
    for r in teacher:
        assert f"| {r['step']} | {r['valid_bleu']:.2f} | {r['valid_loss']:.2f} |" in training
    assert (out / "figures" / "valid_bleu_vs_step.png").is_file()
    rows = {r["system"]: r for r in scores["systems"]}
    gap = rows["ar-beam5"]["bleu"] - rows["padir-T4-B5"]["bleu"]
    # Each row scores the hypotheses written beside it. (Not "every system has output": the
    # 20-step PaDIR still copies its random input, so whether any token survives the
    # dropping of unchanged initial tokens is a matter of luck: of the seeds, of rounding.)
    for key, row in rows.items():
        hyps = (out / "eval" / f"{key}.txt").read_text().splitlines()
        quality, _ = quality_row(hyps, references, scores["tokenize"])
        assert {name: row[name] for name in quality.to_json()} == quality.to_json(), key
    bench = json.loads((out / "bench" / "bench.json").read_text())
    targets = report.split("## Targets")[1].split("\n## ")[0]
    assert targets.count("| speed: padir T=4 B=5 at least 2.0x as fast as ar beam5") == 1
    verdict = "met" if gap <= 1.0 else f"missed by {gap - 1.0:.2f} BLEU"
    if rows["ar-beam5"]["bleu"] < AR_BLEU_FLOOR:  # a 20-step model has not learned
        verdict = f"not meaningful: AR BLEU {rows['ar-beam5']['bleu']:.2f}"
    assert f"(gap {gap:+.2f}) | {verdict} |" in targets
    # The ar1 rows: quality, stutter, speed, the speed-up line, training, commands, stage time.
    quality_table = report.split("## Translation quality")[1].split("\n## ")[0]
    stutter = report.split("## Stutter")[1].split("\n## ")[0]
    for beam, kind in ((1, "greedy"), (5, "beam 5")):
        row = rows[f"ar1-beam{beam}"]
        label = f"AR 1-layer decoder (distilled), {kind}"
        assert (row["label"], row["run"], row["beam"]) == (label, "ar1", beam)
        assert f"| {label} | N | {beam} | {row['bleu']:.2f} | {row['chrf']:.2f} |" in quality_table
        assert f"| {label} | {row['stutter_per_100_words']:.2f} |" in stutter
    assert bench["settings"]["ar1"] == "measured"
    assert bench["settings"]["checkpoints"]["ar1"]["decoder_layers"] == 1
    assert {"ar1 greedy", "ar1 beam5"} <= set(bench["systems"])
    speed_section = report.split("## Speed")[1].split("\n## ")[0]
    assert "| fp32 | ar1 beam5 |" in speed_section
    ar1_speed = next(
        s
        for s in bench["speedups"]
        if (s["precision"], s["padir"], s["ar"]) == ("fp32", "padir T=4 B=5", "ar1 beam5")
    )
    summary = report.split("## In 30 seconds")[1].split("\n## ")[0]
    clause = (
        f"and {ar1_speed['e2e_p50']:.2f}x as fast as the 1-layer-decoder AR beam 5 at the median"
    )
    assert clause in summary
    assert "| AR 1-layer decoder BLEU | AR 1-layer decoder loss |" in training
    commands = report.split("## Reproduce")[1].split("\n## ")[0]
    assert f"data={out}/distill out={out}/ar1 model.n_decoder_layers=1" in commands
    assert f"--ar1 {out}/ar1/best " in commands
    ar1_time = StageRecord.read(out / "stages" / "ar1.json")
    assert f"| ar1 | {ar1_time.finished} |" in report
    # The ablation: its rows are the PaDIR's translations of the first validation sentences.
    ablation = json.loads((out / "ablation" / "ablation.json").read_text())
    assert (ablation["split"], ablation["sentences"]) == ("valid", 8)
    assert [r["variant"] for r in ablation["rows"]] == ["default", "selection=sum"]
    assert (
        StageRecord.read(out / "stages" / "ablation.json").summary["default_bleu"]
        == (ablation["rows"][0]["bleu"])
    )
    assert "| selection=sum | " in report.split("## Decoding ablation")[1].split("\n## ")[0]
    assert f"gmlm analyze ablation --checkpoint {out}/padir/best --data {out}/data " in commands
    assert "--sentences 8 --variant selection=sum" in commands  # the command's batch size
    # The calibration: a grid per student on the validation sentences, each choice in its
    # checkpoint's decoding.json and in the report.
    calibration = CalibrationResult.read(out / "calibrate" / "calibrate.json")
    assert list(calibration.models) == ["ar", "ar1", "padir"]
    section = report.split("## Length calibration (validation)")[1].split("\n## ")[0]
    for run, m in calibration.models.items():
        assert (m.sentences, [r.value for r in m.rows]) == (
            8,
            [0, 1] if run == "padir" else [0.6, 1.5],
        )
        defaults = gmlm.load(out / run / "best", device="cpu").defaults
        assert defaults == ({} if m.chosen == m.default else {m.setting: m.chosen})
        assert f"`{m.setting}` = {m.label(m.rows[0].value)} | {m.rows[0].bleu:.2f} |" in section
    assert StageRecord.read(out / "stages" / "calibrate.json").summary == {
        run: {m.setting: m.chosen} for run, m in calibration.models.items()
    }
    padir_line = f"gmlm analyze calibrate --checkpoint {out}/padir/best --data {out}/data "
    assert padir_line + "--sentences 8 --min-gain 0 --values=0,1\n" in commands
    assert ablation["settings"]["decoding"]["length_shift"] == calibration.models["padir"].chosen
    assert (out / "theory" / "figure3.png").is_file()
    theory = report.split("## Theory")[1].split("\n## ")[0]
    verify = json.loads((out / "theory" / "verify.json").read_text())
    assert verify["claims"] and all(f"| {claim} | " in theory for claim in verify["claims"])
    published = publish_report(out, tmp_path / "docs" / "RESULTS.md")
    text = published.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert (
        "RESULTS-figures/theory-figure3.png" in links
        and "RESULTS-figures/bleu_vs_steps.png" in links
    )
    assert all((published.parent / link).is_file() for link in links)
    # Hand-written notes after the marker survive publishing again.
    notes = f"{NOTES_MARKER}\n\n## Diagnosis\n\nwritten by hand\n"
    published.write_text(text + "\n" + notes)
    assert publish_report(out, published).read_text() == text.rstrip("\n") + "\n\n" + notes
    # A rerun skips every stage.
    again: list[str] = []
    run_reproduce(cfg, out, progress=False, log=again.append)
    assert sum("done already" in m for m in again) == len(STAGES)
    # Redoing the evaluation reuses the written hypotheses and gives the same scores.
    run_reproduce(cfg, out, ["evaluate"], redo=["evaluate"], progress=False, log=again.append)
    redone = "redoing evaluate; report will run again without --stages"
    assert f"[evaluate] run again by --redo, with the stages that read it: {redone}" in again
    assert json.loads((out / "eval" / "scores.json").read_text())["systems"] == [
        {**r, "decode_seconds": None} for r in scores["systems"]
    ]
    # Redoing the calibration chooses again from the class defaults: the stage's own earlier
    # choices (here PaDIR's, as an interrupted calibration with another grid may leave it) are
    # not the values to beat, so the same settings make the same choices.
    earlier = out / "padir" / "best" / "decoding.json"
    earlier.write_text('{"settings": {"length_shift": 3}, "chosen_on": "another grid"}')
    again.clear()
    run_reproduce(cfg, out, ["calibrate"], redo=["calibrate"], progress=False, log=again.append)
    redone = CalibrationResult.read(out / "calibrate" / "calibrate.json")
    for run, m in redone.models.items():
        first = calibration.models[run]
        bleu = [(r.value, r.bleu) for r in m.rows]
        assert (m.previous, m.chosen, bleu) == (
            None,
            first.chosen,
            [(r.value, r.bleu) for r in first.rows],
        ), run
    assert f"  padir: {earlier} holds an earlier calibration's choice: choosing again" in again
    # What read the calibration goes with it, outside --stages by the next whole run: no
    # result stays computed with settings that are gone (the report went with the evaluation).
    readers = [n for n in STAGES if "calibrate" in STAGE[n].needs]
    assert readers[:2] == ["compare", "ablation"]
    redoing = f"redoing calibrate; {', '.join(readers)} will run again without --stages"
    assert f"[calibrate] run again by --redo, with the stages that read it: {redoing}" in again
    done = [n for n in STAGES if (out / "stages" / f"{n}.json").is_file()]
    assert done == [n for n in STAGES if n not in [*readers, "report"]]

    # A redo stopped part way (a kill in its first stage) leaves the stages it was to redo to
    # be run, not taken for done by the next run without --redo.
    def killed(_ctx: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("gmlm.reproduce.stages.padir", killed)
    with pytest.raises(KeyboardInterrupt):
        run_reproduce(cfg, out, ["padir", "calibrate"], redo=["padir"], progress=False)
    assert not any((out / "stages" / f"{n}.json").exists() for n in ("padir", "calibrate"))


@pytest.mark.slow
def test_smoke_preset_end_to_end(corpus, tmp_path):
    """The smoke preset as shipped, on the synthetic corpus instead of the Bible (offline)."""
    out = tmp_path / "smoke"
    cfg = load_reproduce_config("smoke", [f"data.corpus={corpus}", "data.vocab_size=400"])
    run_reproduce(cfg, out, progress=False, log=lambda _m: None)
    assert all((out / "stages" / f"{stage}.json").is_file() for stage in STAGES)
    scores = json.loads((out / "eval" / "scores.json").read_text())
    assert len(scores["systems"]) == 4 + 4 and (out / "REPORT.md").is_file()
    bench = json.loads((out / "bench" / "bench.json").read_text())
    assert {r["system"] for r in bench["results"]} >= {
        "ar greedy",
        "ar beam5",
        "teacher greedy",
        "teacher beam5",
        "padir T=4 B=5",
    }


def test_a_missing_optional_package_fails_before_the_first_stage(tmp_path, monkeypatch):
    def missing():
        raise GmlmError("CTranslate2 is not installed; install the optional extra: X")

    monkeypatch.setattr("gmlm.export.ctranslate2.import_ctranslate2", missing)
    cfg = load_reproduce_config("smoke", ["bench.ctranslate2=true"])
    with pytest.raises(GmlmError, match=r"bench.ctranslate2=true: CTranslate2 is not installed.*"):
        run_reproduce(cfg, tmp_path / "run", progress=False, log=lambda _m: None)
    assert not (tmp_path / "run" / "stages").exists()  # no stage ran
    # Without the bench still to run, the package is not needed.
    run_reproduce(cfg, tmp_path / "run", ["theory"], progress=False, log=lambda _m: None)


@pytest.mark.parametrize("wanted", [True, False])
def test_the_bench_stage_passes_ctranslate2_on(tmp_path, monkeypatch, wanted):
    from types import SimpleNamespace

    from gmlm.reproduce import stages

    seen: dict[str, object] = {}

    def fake_bench(*args, **kwargs):
        seen.update(settings=args[3], **kwargs)
        return SimpleNamespace(systems=("a", "b"))

    monkeypatch.setattr("gmlm.bench.run_bench", fake_bench)
    cfg = load_reproduce_config("multi30k" if wanted else "smoke")
    summary = stages.bench(stages.Context(cfg, tmp_path, False, lambda _m: None))
    settings = seen["settings"]
    assert isinstance(settings, BenchSettings)
    assert summary == {"systems": 2} and settings.ctranslate2 is wanted
    if wanted:  # the parity preset times as `make speed` does, with bf16 too
        assert settings.precisions == ("fp32", "bf16", "int8") and settings.sentences == 200


@pytest.mark.parametrize(
    ("name", "warmup", "precisions"),
    [
        ("bible-tiny", 3, ("fp32", "bf16")),
        ("laptop", 10, ("fp32", "bf16")),
        ("paper", 10, ("fp32", "bf16")),
        ("multi30k", 10, ("fp32", "bf16", "int8")),
        ("smoke", 2, ("fp32",)),
    ],
)
def test_the_bench_stage_is_the_bench_settings_each_preset_times_with(name, warmup, precisions):
    """The stage is `gmlm bench`'s settings (one default each: a warm-up of 5 and every
    precision); the presets that time with another warm-up or fewer precisions say so."""
    bench = load_reproduce_config(name).bench
    assert isinstance(bench, BenchSettings)
    assert (bench.warmup, bench.precisions) == (warmup, precisions)
    assert (BenchSettings().warmup, BenchSettings().precisions) == (5, ("fp32", "bf16", "int8"))


@pytest.mark.parametrize(
    ("name", "max_len"),
    [
        ("bible-tiny", 96),
        ("demo", 128),
        ("demo-en-de", 128),
        ("laptop", 128),
        ("multi30k", 128),
        ("multi30k-en-de", 128),
        ("multi30k-quick", 128),
        ("paper", 256),
        ("smoke", 64),
    ],
)
def test_the_data_stage_is_the_prepare_settings_each_preset_prepares_with(name, max_len):
    """The stage is `gmlm data prepare`'s settings, with one default each (the library's
    max_len of 256); the presets that prepare shorter sentences say so."""
    from gmlm.data.settings import PrepareSettings

    data = load_reproduce_config(name).data
    assert isinstance(data, PrepareSettings)
    assert data.max_len == max_len
    assert PrepareSettings().max_len == 256


def test_the_theory_stage_runs_the_theory_commands_settings():
    """By default the stage runs what `gmlm theory verify`, `figure1`-`figure3` run (the
    paper's settings); a preset's keys change those settings, each in every command that has
    it (repetitions and seed: one setting of all three)."""
    from gmlm.theory.settings import (
        FIGURE_COUPLINGS,
        EstimationSettings,
        HittingSettings,
        VerifySettings,
    )

    stage = load_reproduce_config("multi30k-en-de", ["theory.enabled=true"]).theory
    assert stage.verify() == VerifySettings()
    for coupling in FIGURE_COUPLINGS.values():
        assert stage.estimation(coupling) == EstimationSettings(coupling=coupling)
    assert stage.hitting() == HittingSettings()
    smoke = load_reproduce_config("smoke").theory
    assert smoke.verify() == VerifySettings(max_n=4)
    assert smoke.estimation(0.3) == EstimationSettings(
        coupling=0.3, sample_sizes=(100, 300), repetitions=2
    )
    assert (smoke.hitting().couplings, smoke.hitting().repetitions) == ((1.0, 3.0), 2)
