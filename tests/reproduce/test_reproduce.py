"""The reproduction pipeline: errors, resumption, and a whole run on a synthetic corpus."""

from __future__ import annotations

import json
import re

import pytest

from gmlm.config import ConfigError
from gmlm.errors import GmlmError
from gmlm.evaluation.summary import quality_row
from gmlm.reproduce.config import STAGES, load_reproduce_config, parse_stages
from gmlm.reproduce.pipeline import run_reproduce
from gmlm.reproduce.publish import NOTES_MARKER, publish_report
from tests.helpers.corpora import make_pairs, write_lines

QUICK_THEORY = [
    "theory.verify_max_n=3",
    "theory.repetitions=2",
    "theory.sample_sizes=[100,200]",
    "theory.figure3_couplings=[1.0]",
    "theory.figure3_ks=[1,10]",
    "theory.figure3_budget=50",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("corpus")
    src, tgt = make_pairs(1500, seed=3)
    write_lines(root / "c.de", src)
    write_lines(root / "c.en", tgt)
    return f"files:{root / 'c.de'},{root / 'c.en'}"


def quick(corpus: str, *extra: str) -> list[str]:
    """The smoke preset made faster still: a few training steps, small evaluation grids."""
    return [
        f"data.corpus={corpus}",
        "data.vocab_size=400",
        "data.overrides=[valid_fraction=0.05,test_fraction=0.05]",
        "threads=1",
        *QUICK_THEORY,
        "teacher.overrides=[max_steps=40,valid_every=20,valid_sentences=5]",
        "ar.overrides=[max_steps=20,valid_every=20,valid_sentences=0]",
        "padir.overrides=[max_steps=20,valid_every=20,valid_sentences=0]",
        "evaluate.padir_steps=[1,4]",
        "bench.sentences=3",
        "bench.warmup=1",
        "bench.batch_sizes=[1,2]",
        "attention.sentences=20",
        *extra,
    ]


def test_unknown_preset_stage_and_key():
    with pytest.raises(ConfigError, match=r"unknown reproduce preset 'nope'.*laptop"):
        load_reproduce_config("nope")
    with pytest.raises(ConfigError, match=r"unknown stage.*train.*the stages are theory"):
        parse_stages("theory,train")
    with pytest.raises(ConfigError, match="bogus"):
        load_reproduce_config("smoke", ["evaluate.bogus=1"])
    assert parse_stages("report,theory") == ["theory", "report"]
    assert parse_stages(None) == list(STAGES)


@pytest.mark.parametrize("name", ["smoke", "demo", "laptop", "multi30k", "paper"])
def test_presets_resolve(name):
    cfg = load_reproduce_config(name)
    assert cfg.preset == name and cfg.description
    from gmlm.training.config import load_train_config

    for stage in (cfg.teacher, cfg.ar, cfg.padir):
        load_train_config(stage.preset, ["data=x", "out=y", *stage.overrides]).validate()


def test_refuses_a_folder_of_another_preset_or_config(tmp_path):
    out = tmp_path / "run"
    cfg = load_reproduce_config("smoke", ["theory.enabled=false"])
    run_reproduce(cfg, out, ["theory"], progress=False, log=lambda _m: None)
    assert json.loads((out / "stages" / "theory.json").read_text())["summary"]["skipped"]
    other = load_reproduce_config("demo", ["theory.enabled=false"])
    with pytest.raises(
        GmlmError, match=r"holds a run of preset 'smoke' \(this is 'demo'\).*ar.overrides"
    ):
        run_reproduce(other, out, ["theory"], progress=False, log=lambda _m: None)
    # A changed thread count is not a different run.
    same = load_reproduce_config("smoke", ["theory.enabled=false", "threads=1"])
    run_reproduce(same, out, ["theory"], progress=False, log=lambda _m: None)
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


def test_stage_needs_its_inputs(tmp_path):
    cfg = load_reproduce_config("smoke")
    with pytest.raises(GmlmError, match="stage 'teacher' needs stage\\(s\\) data first"):
        run_reproduce(cfg, tmp_path / "run", ["teacher"], progress=False, log=lambda _m: None)


def test_whole_pipeline_on_a_synthetic_corpus(corpus, tmp_path):
    out = tmp_path / "run"
    cfg = load_reproduce_config("smoke", quick(corpus))
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
        "padir-T1-B1",
        "padir-T4-B1",
        "padir-T1-B5",
        "padir-T4-B5",
    ]
    references = (out / "eval" / "reference.txt").read_text().splitlines()
    for key in keys:
        assert len((out / "eval" / f"{key}.txt").read_text().splitlines()) == len(references)
    report = (out / "REPORT.md").read_text()
    for heading in (
        "Targets",
        "Translation quality",
        "Stutter",
        "Speed",
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
    speed = [s for s in bench["speedups"] if (s["padir"], s["ar"]) == ("padir T=4 B=5", "ar beam5")]
    targets = report.split("## Targets")[1].split("\n## ")[0]
    assert targets.count("| speed (") == len(speed)
    verdict = "met" if gap <= 1.0 else f"missed by {gap - 1.0:.2f} BLEU"
    assert f"(gap {gap:+.2f}) | {verdict} |" in targets
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
    assert json.loads((out / "eval" / "scores.json").read_text())["systems"] == [
        {**r, "decode_seconds": None} for r in scores["systems"]
    ]


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
