"""The `demo` preset: the released checkpoints through the reproduction pipeline, its report's
numbers against `gmlm evaluate` and the `sacrebleu` command, the run without a test set, and
the verdicts and progress lines it relies on."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gmlm.analysis.results import AttentionResult, LengthResult
from gmlm.bench.result import BenchResult
from gmlm.checkpoint.fingerprint import checkpoint_fingerprint
from gmlm.cli.main import main
from gmlm.data.binarized import load_dataset
from gmlm.errors import GmlmError
from gmlm.evaluation.results import Evaluation, EvaluationScores
from gmlm.reproduce import stages
from gmlm.reproduce.config import STAGES, StageSeconds, load_reproduce_config
from gmlm.reproduce.pipeline import _Clock, run_reproduce
from gmlm.reproduce.sections import examples_section
from gmlm.reproduce.stage_record import StageRecord
from gmlm.reproduce.stand_in import EXAMPLES, ExampleTranslations
from gmlm.reproduce.summary import attention_sentence, final_lines
from tests.helpers.corpora import write_lines

pytestmark = pytest.mark.usefixtures("one_thread")

RELEASED = Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-de-en"
FIXTURE_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "run"
SCORED = 10  # of the 12 example sentences, standing in for the demo's 300 of 1,000


def demo_overrides(corpus: Path) -> list[str]:
    """The demo preset cut down: no theory, two AR and one PaDIR system, a tiny benchmark."""
    return [
        f"data.corpus=multi30k:{corpus}",
        f"data.tokenizer={RELEASED / 'ar' / 'tokenizer'}",
        f"ar.checkpoint={RELEASED / 'ar'}",
        f"padir.checkpoint={RELEASED / 'padir'}",
        "threads=1",
        "theory.enabled=false",
        "evaluate.ar_beams=[1,5]",
        "evaluate.padir_steps=[4]",
        "evaluate.length_beams=[5]",
        "bench.sentences=2",
        "bench.warmup=1",
        "bench.threads=1",
        "bench.padir_steps=[4]",
        "bench.length_beams=[5]",
        "attention.sentences=6",
        "length.sentences=4",
        f"evaluate.sentences={SCORED}",
    ]


def examples() -> tuple[list[str], list[str]]:
    """gmlm's own example sentences and our reference translations of them."""
    read = [
        EXAMPLES.with_suffix(s).read_text(encoding="utf-8").splitlines() for s in (".de", ".en")
    ]
    return read[0], read[1]


def sacrebleu_command(ref: Path, hyp: Path) -> dict[str, float]:
    exe = shutil.which("sacrebleu") or str(Path(sys.executable).parent / "sacrebleu")
    if not Path(exe).exists():
        pytest.skip("the sacrebleu command is not installed (it comes with sacrebleu)")
    out = subprocess.run(
        [exe, str(ref), "-i", str(hyp), "-m", "bleu", "chrf", "-f", "json", "-w", "4"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    bleu, chrf = json.loads(out)
    return {"bleu": bleu["score"], "chrf": chrf["score"]}


def test_demo_without_the_test_set_then_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "raw"  # not there yet
    out = tmp_path / "demo"
    cfg = load_reproduce_config("demo", demo_overrides(folder))
    messages: list[str] = []
    run_reproduce(cfg, out, progress=False, log=messages.append)
    # Without Multi30k: the models translate the examples, the speed is timed on them, and the
    # quality stages say what they need.
    assert StageRecord.read(out / "stages" / "data.json").stand_in == f"no folder {folder}"
    translated = ExampleTranslations.read(out / "eval" / "examples.json")
    sources, references = examples()
    assert translated.sources == tuple(sources)
    assert set(translated.translations) == {"ar-beam1", "ar-beam5", "padir-T4-B5"}
    assert not (out / "eval" / "scores.json").exists()
    # ar1 is off by default: its stage finishes at once and adds no system anywhere.
    assert StageRecord.read(out / "stages" / "ar1.json").summary == {"skipped": "ar1.enabled=false"}
    assert not (out / "ar1").exists()
    assert BenchResult.read(out / "bench" / "bench.json").settings.ar1.startswith("skipped")
    for stage in ("attention", "length"):
        skipped = StageRecord.read(out / "stages" / f"{stage}.json").summary["skipped"]
        assert "needs the Multi30k test set" in skipped and "github.com/multi30k/dataset" in skipped
    report = (out / "REPORT.md").read_text()
    summary = report.split("## In 30 seconds")[1].split("\n## ")[0]
    assert "No test set here" in summary and "make demo MULTI30K=DIR" in summary
    assert "**Speed-up**" in summary and "**Quality**" not in summary
    assert "## Example translations" in report and sources[0] in report
    assert translated.source_lang == "de" and "(examples.de, not a test set" in report
    assert "| German |" in report
    assert translated.translations["padir-T4-B5"][0] in report
    lines = final_lines(cfg, out)
    assert lines[0] == f"report: {out / 'REPORT.md'}" and "quality not measured" in lines[-1]

    # The test files arrive (our own sentences in Multi30k's layout): the same command
    # prepares them and redoes the stages that read the data; the evaluation scores the first
    # SCORED of them, and the report and the last lines say so.
    folder.mkdir()
    write_lines(folder / "test_2016_flickr.de.gz", sources)
    write_lines(folder / "test_2016_flickr.en.gz", references)
    capsys.readouterr()
    args = ["reproduce", "--preset", "demo", "--out", str(out), "--no-progress"]
    assert main([*args, *demo_overrides(folder)]) == 0
    printed = capsys.readouterr().out
    assert "[data] the test set is there now" in printed
    assert StageRecord.read(out / "stages" / "data.json").stand_in is None
    assert "done already" in printed  # the checkpoint stages are not redone
    scores = EvaluationScores.read(out / "eval" / "scores.json")
    assert (scores.sentences, scores.split_sentences) == (SCORED, len(sources))
    assert [r.system for r in scores.systems] == ["ar-beam1", "ar-beam5", "padir-T4-B5"]
    ref = out / "eval" / "reference.txt"
    assert ref.read_text(encoding="utf-8").splitlines() == references[:SCORED]
    report = (out / "REPORT.md").read_text()
    assert f"\nData: multi30k:{folder}, translating de-en.\n" in report  # the manifest's pair
    assert "No test set here" not in report and "## Example translations" not in report
    quality = report.split("## Translation quality")[1].split("\n## ")[0]
    assert f"The first {SCORED} of the test split's {len(sources)} sentences, decoded" in quality
    evaluated = {}
    for key, label, steps, hyps in (
        ("ar-beam1", "AR, greedy", "N", 1),
        ("ar-beam5", "AR, beam 5", "N", 5),
        ("padir-T4-B5", "PaDIR T=4 B=5", 4, 5),
    ):
        hyp = out / "eval" / f"{key}.txt"
        assert main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"]) == 0
        ours = Evaluation.from_json(json.loads(capsys.readouterr().out))
        golden = sacrebleu_command(ref, hyp)
        assert ours.bleu.score == pytest.approx(golden["bleu"], abs=5e-5)
        assert ours.chrf.score == pytest.approx(golden["chrf"], abs=5e-5)
        bleu, chrf = ours.bleu.score, ours.chrf.score
        assert f"| {label} | {steps} | {hyps} | {bleu:.2f} | {chrf:.2f} |" in quality, key
        row = scores.system(key)
        assert row is not None
        stutter = ours.stutter.stutters_per_100_words
        assert row.quality.stutter_per_100_words == pytest.approx(stutter, abs=5e-4)
        evaluated[key] = ours
    ar, padir = evaluated["ar-beam5"].bleu.score, evaluated["padir-T4-B5"].bleu.score
    assert ar > 20 and padir > 20  # trained models on sentences like their training data
    ar, padir = round(ar, 2), round(padir, 2)  # the scores as recorded: the gap is theirs
    summary = report.split("## In 30 seconds")[1].split("\n## ")[0]
    part = f"the first {SCORED} of the test split's {len(sources)} sentences"
    gap = (
        f"{padir:.2f} BLEU vs AR, beam 5 {ar:.2f}: gap {ar - padir:+.2f} ({part}; no verdict "
        "on a subset)"
    )
    assert gap in summary and gap in printed
    targets = report.split("## Targets")[1].split("\n## ")[0]
    assert f"(gap {ar - padir:+.2f}) | no verdict on a subset: {part} |" in targets
    whole = (
        f"`evaluate.sentences=0` scores the whole test split: `gmlm reproduce --preset "
        f"{out}/reproduce.yaml --out {out}-full evaluate.sentences=0`; compare "
        f"{cfg.published}"
    )
    assert cfg.published and whole in summary and whole in printed
    bench = BenchResult.read(out / "bench" / "bench.json")
    speed = next(
        s
        for s in bench.speedups
        if (s.precision, s.padir, s.ar) == ("fp32", "padir T=4 B=5", "ar beam5")
    )
    ratio = f"{speed.e2e_p50:.2f}x as fast as AR beam 5 at the median (batch 1,"
    assert ratio in summary and ratio in printed  # no p99 of 2 timed sentences:
    assert "2 timed sentences, too few for a p99, which needs 100)" in summary
    padir_row = scores.system("padir-T4-B5")
    assert padir_row is not None
    stutter = f"PaDIR T=4 B=5 {padir_row.quality.stutter_per_100_words:.2f} stuttered"
    assert stutter in summary and stutter in printed
    attention = AttentionResult.read(out / "attention" / "attention.json")
    assert attention.sentences.decoded == 6
    sentence = attention_sentence(attention)
    assert sentence is not None and sentence in summary
    length = LengthResult.read(out / "length" / "length.json")
    assert length.sentences.analysed + sum(length.sentences.skipped.values()) == 4
    assert "## Length prediction" in report
    assert f"report: {out / 'REPORT.md'}" in printed.splitlines()


def test_a_given_checkpoint_of_the_wrong_kind_or_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(RELEASED.parents[1])  # the preset's paths are relative to the repository
    cfg = load_reproduce_config("demo", [f"ar.checkpoint={RELEASED / 'padir'}"])
    ctx = stages.Context(cfg, tmp_path, False, lambda _m: None)
    with pytest.raises(GmlmError, match=r"ar.checkpoint=.*padir: holds a padir model, not ar"):
        stages.ar(ctx)
    cfg = load_reproduce_config("demo", [f"padir.checkpoint={tmp_path / 'nope'}"])
    ctx = stages.Context(cfg, tmp_path, False, lambda _m: None)
    with pytest.raises(GmlmError, match=r"padir.checkpoint=.*nope: no such folder"):
        stages.padir(ctx)
    # ar1 is the AR baseline with a 1-layer decoder: the released 6-layer AR is refused,
    cfg = load_reproduce_config("demo", ["ar1.enabled=true", f"ar1.checkpoint={RELEASED / 'ar'}"])
    ctx = stages.Context(cfg, tmp_path, False, lambda _m: None)
    with pytest.raises(
        GmlmError, match=r"ar1.checkpoint=.*ar: a model with 6 decoder layers, but the ar1 stage"
    ):
        stages.ar1(ctx)
    # and so is training one of another depth, before any training starts.
    cfg = load_reproduce_config(
        "demo", ["ar1.enabled=true", "ar1.overrides=[model.n_decoder_layers=2]"]
    )
    ctx = stages.Context(cfg, tmp_path, False, lambda _m: None)
    with pytest.raises(
        GmlmError,
        match=r"ar1.preset=small-ar1, ar1.overrides=\[model.n_decoder_layers=2\]: a model with 2 ",
    ):
        stages.ar1(ctx)
    assert not (tmp_path / "ar1").exists()
    assert stages.ar(ctx) == {
        "checkpoint": "checkpoints/multi30k-de-en/ar",
        "trained": False,
        "step": 3000,
        "fingerprint": checkpoint_fingerprint(RELEASED / "ar"),
    }


def test_the_en_de_demo_translates_english_without_the_test_set(tmp_path: Path) -> None:
    """`make demo-en-de`'s preset, cut down, without Multi30k: the released English-German
    models translate gmlm's English example sentences into German, and the report and the
    last lines say how to rerun that demo once the test set is there."""
    cfg = load_reproduce_config("demo-en-de")
    root = RELEASED.parents[1]
    en_de = root / "checkpoints" / "multi30k-en-de"
    assert (cfg.ar.checkpoint, cfg.padir.checkpoint) == (
        "checkpoints/multi30k-en-de/ar",
        "checkpoints/multi30k-en-de/padir",
    )
    assert cfg.data.tokenizer == "checkpoints/multi30k-en-de/ar/tokenizer"
    assert not cfg.theory.enabled and (en_de / "ar" / "tokenizer").is_dir()
    folder = tmp_path / "raw"  # not there
    overrides = [*demo_overrides(folder), f"data.corpus=multi30k:{folder}:en-de"]
    overrides += [
        f"data.tokenizer={en_de / 'ar' / 'tokenizer'}",
        f"ar.checkpoint={en_de / 'ar'}",
        f"padir.checkpoint={en_de / 'padir'}",
    ]
    cfg = load_reproduce_config("demo-en-de", overrides)
    out = tmp_path / "demo-en-de"
    run_reproduce(cfg, out, progress=False, log=lambda _m: None)
    translated = ExampleTranslations.read(out / "eval" / "examples.json")
    _german, english = examples()
    assert translated.source_lang == "en" and translated.sources == tuple(english)
    for system in ("ar-beam5", "padir-T4-B5"):
        output = " ".join(translated.translations[system]).lower()
        found = [w for w in ("mann", "hunde", "schnee", "frau", "hut", "kinder") if w in output]
        assert len(found) >= 5, (system, translated.translations[system][:3])
    report = (out / "REPORT.md").read_text()
    assert "| English |" in report and "make demo-en-de MULTI30K=DIR" in report
    last = final_lines(cfg, out)[-1]
    assert "`make demo-en-de` again" in last and "data.corpus=multi30k:DIR:en-de`" in last


def test_a_given_checkpoint_of_the_other_direction_is_refused(tmp_path: Path) -> None:
    """English-German text (here gmlm's examples, reversed, standing in for a missing
    Multi30k) with the German-English checkpoints: refused before any translation."""
    cfg = load_reproduce_config(
        "demo",
        [
            f"data.corpus=multi30k:{tmp_path / 'absent'}:en-de",
            f"data.tokenizer={RELEASED / 'ar' / 'tokenizer'}",
            f"ar.checkpoint={RELEASED / 'ar'}",
            f"padir.checkpoint={RELEASED / 'padir'}",
        ],
    )
    ctx = stages.Context(cfg, tmp_path / "run", False, lambda _m: None)
    stages.data(ctx)
    sources, targets = examples()
    assert load_dataset(ctx.data_dir).read_text("test", "src") == targets  # examples.en
    assert load_dataset(ctx.data_dir).read_text("test", "tgt") == sources
    for name in ("ar", "padir"):
        with pytest.raises(
            GmlmError,
            match=rf"{name}.checkpoint=.*translates de-en \(its meta.json says so\), not en-de; "
            r"give the en-de checkpoints, or a data.corpus in the de-en direction",
        ):
            getattr(stages, name)(ctx)
    # With English-German checkpoints, the report's examples table is headed by English.
    translated = ExampleTranslations(
        sources=("A dog runs.",),
        source_lang="en",
        labels={"ar": "AR"},
        translations={"ar": ("Ein Hund rennt.",)},
        stand_in="no test set",
    )
    text = "\n".join(examples_section(translated, ["ar"]))
    assert "(examples.en, not a test set" in text and "| English | AR |" in text


def test_a_given_checkpoint_replaced_on_disk_redoes_what_read_it(tmp_path: Path) -> None:
    """A repository update replaces a released model: rerunning the demo in the same folder
    redoes the stages that read it, with fresh translations, and leaves the others alone."""
    ar = tmp_path / "ar"
    shutil.copytree(RELEASED / "ar", ar)
    overrides = [f"ar.checkpoint={ar}", f"padir.checkpoint={RELEASED / 'padir'}"]
    overrides += [f"data.corpus=multi30k:{tmp_path / 'none'}", f"data.tokenizer={ar / 'tokenizer'}"]
    cfg = load_reproduce_config("demo", [*overrides, "threads=1", "theory.enabled=false"])
    out = tmp_path / "demo"
    first = ["theory", "data", "teacher", "distill", "ar", "ar1", "padir"]
    run_reproduce(cfg, out, first, progress=False, log=lambda _m: None)
    # Later stages as a finished run leaves them (their work is not what is tested here).
    for name in ("calibrate", "evaluate", "bench", "attention", "report"):
        StageRecord(stage=name, seconds=0.0, finished="x", host="x", summary={}).write(
            out / "stages" / f"{name}.json"
        )
    messages: list[str] = []
    run_reproduce(cfg, out, ["ar"], progress=False, log=messages.append)
    assert not any("changed" in m for m in messages)  # the same checkpoint: nothing redone

    (ar / "decoding.json").write_text(
        '{"settings": {"length_penalty": 1.0}, "chosen_on": "by hand"}', encoding="utf-8"
    )
    run_reproduce(cfg, out, ["ar"], progress=False, log=messages.append)
    # attention reads PaDIR's checkpoint and the calibration, which covers every student; the
    # stages outside --stages lose their records, so that the next whole run redoes them.
    later = "calibrate, evaluate, bench, attention, report"
    redo = f"redoing ar; {later} will run again without --stages"
    assert f"[ar] a given checkpoint changed since this run used it: {redo}" in messages
    for name in later.split(", "):
        assert not (out / "stages" / f"{name}.json").exists()
    assert StageRecord.read(out / "stages" / "ar.json").fingerprint == checkpoint_fingerprint(ar)
    # A record from a gmlm before digests counts as changed.
    record = StageRecord.read(out / "stages" / "padir.json")
    dataclasses.replace(record, summary={"checkpoint": "x"}).write(out / "stages" / "padir.json")
    messages.clear()
    run_reproduce(cfg, out, ["padir"], progress=False, log=messages.append)
    assert "[padir] a given checkpoint changed since this run used it: redoing padir" in messages
    assert StageRecord.read(out / "stages" / "padir.json").fingerprint is not None


def test_saved_translations_are_reused_only_with_the_settings_that_made_them(
    tmp_path: Path,
) -> None:
    """An evaluation interrupted after translating (its record missing) and rerun: with the
    same settings it reuses every system's translations; with another evaluate.sentences,
    evaluate.bf16 or a changed checkpoint it translates again the systems concerned, saying
    why, and never scores a file made otherwise."""
    folder = tmp_path / "multi30k"
    folder.mkdir()
    sources, references = examples()
    write_lines(folder / "test_2016_flickr.de.gz", sources)
    write_lines(folder / "test_2016_flickr.en.gz", references)
    ar = tmp_path / "ar"
    shutil.copytree(RELEASED / "ar", ar)
    settings = [
        f"data.corpus=multi30k:{folder}",
        f"data.tokenizer={ar / 'tokenizer'}",
        f"ar.checkpoint={ar}",
        f"padir.checkpoint={RELEASED / 'padir'}",
        "threads=1",
        "theory.enabled=false",
        "evaluate.ar_beams=[1]",
        "evaluate.padir_steps=[1]",
        "evaluate.length_beams=[1]",
    ]
    out = tmp_path / "run"
    upto = list(STAGES[: STAGES.index("evaluate") + 1])

    def evaluate(*more: str) -> tuple[list[str], EvaluationScores]:
        """Run up to the evaluation with `more` settings, then forget that it finished."""
        messages: list[str] = []
        cfg = load_reproduce_config("demo", [*settings, *more])
        run_reproduce(cfg, out, upto, progress=False, log=messages.append)
        (out / "stages" / "evaluate.json").unlink()
        return messages, EvaluationScores.read(out / "eval" / "scores.json")

    def redone(messages: list[str]) -> dict[str, str]:
        return {
            m.split(":")[0].strip(): m.split("other settings (")[1].split("): translating")[0]
            for m in messages
            if "translating again" in m
        }

    messages, scores = evaluate("evaluate.sentences=4")
    assert redone(messages) == {} and scores.sentences == 4
    messages, scores = evaluate("evaluate.sentences=4")
    assert redone(messages) == {}
    assert [r.decode_seconds for r in scores.systems] == [None, None]  # both reused
    messages, scores = evaluate("evaluate.sentences=6")
    assert redone(messages) == {
        "AR, greedy": "sentences 4 -> 6",
        "PaDIR T=1 B=1": "sentences 4 -> 6",
    }
    assert scores.sentences == 6
    for key in ("ar-beam1", "padir-T1-B1"):
        assert len((out / "eval" / f"{key}.txt").read_text().splitlines()) == 6
    messages, scores = evaluate("evaluate.sentences=6", "evaluate.bf16=true")
    assert set(redone(messages).values()) == {"precision fp32 -> bf16"}
    assert scores.precision == "bf16"
    (ar / "decoding.json").write_text(
        '{"settings": {"length_penalty": 1.0}, "chosen_on": "by hand"}', encoding="utf-8"
    )
    messages, _ = evaluate("evaluate.sentences=6", "evaluate.bf16=true")
    assert redone(messages) == {
        "AR, greedy": "the checkpoint (weights, tokenizer or decoding.json)"
    }


def test_time_left_scales_with_the_pace_so_far() -> None:
    cfg = load_reproduce_config("smoke")
    assert _Clock(cfg, ["theory", "data"]).left("theory") == ""  # no measured times
    cfg.expected_seconds = StageSeconds(theory=60.0, evaluate=120.0)
    clock = _Clock(cfg, ["theory", "data", "evaluate"])
    assert clock.left("theory") == "; about 3.0 min left in all"
    clock.done("theory", 120.0)  # twice as slow as measured
    assert clock.left("data") == "; about 4.0 min left in all"
    clock.done("data", 1.0)
    assert clock.left("evaluate") == "; about 4.0 min left in all"
    clock.done("evaluate", 10.0)
    assert [f.name for f in dataclasses.fields(StageSeconds)] == list(STAGES)
