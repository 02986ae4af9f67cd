"""The training ablation stage: PaDIR retrained briefly per variant, compared with the padir
run at the same step (gmlm.reproduce.train_ablation), on a tiny synthetic corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from gmlm.errors import GmlmError
from gmlm.reproduce.config import load_reproduce_config
from gmlm.reproduce.metrics import validations
from gmlm.reproduce.pipeline import run_reproduce
from gmlm.reproduce.sections import train_ablation_section
from gmlm.reproduce.train_ablation import TrainAblationResult, slug, variant_overrides
from tests.helpers.reproduce_runs import synthetic_data

# On the CPU also where CUDA is present: the exact equalities below need deterministic
# kernels, and CUDA's backward passes are not.
PADIR = (
    "padir.overrides=[max_steps=20,valid_every=10,valid_sentences=4,optim.schedule=inverse_sqrt,"
    "device=cpu]"
)
# A setting that changes nothing the training computes: its run must repeat the padir run's.
NEUTRAL = "log_every=7"


def settings(corpus: str, *extra: str) -> list[str]:
    return [
        *synthetic_data(corpus),
        "theory.enabled=false",
        "distill.enabled=false",
        PADIR,
        "train_ablation.enabled=true",
        "train_ablation.steps=10",
        *extra,
    ]


def test_each_variant_is_compared_with_the_padir_run_at_the_same_step(
    corpus: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    variants = f"train_ablation.variants=['{NEUTRAL}','model.dropout=0.0 padir.length_weight=0.5']"
    cfg = load_reproduce_config("smoke", settings(corpus, variants))
    run_reproduce(cfg, out, ["data", "teacher", "distill", "padir"], progress=False, log=print)
    # Resumed where the machine's training precision is bf16: the variants still train in the
    # fp32 the padir run trained in, so precision is no difference between them.
    cfg = load_reproduce_config("smoke", settings(corpus, variants, "train_precision=bf16"))
    run_reproduce(cfg, out, ["train_ablation"], progress=False, log=print)
    result = TrainAblationResult.read(out / "train_ablation" / "train_ablation.json")
    assert result.steps == 10
    main = next(r for r in validations(out / "padir" / "metrics.jsonl") if r["step"] == 10)
    assert (result.baseline.loss, result.baseline.bleu) == (main["valid_loss"], main["valid_bleu"])
    assert result.baseline.precision == "fp32"
    neutral, changed = result.rows
    assert neutral.settings == (NEUTRAL,) and neutral.precision == "fp32"
    # Same data, seed and schedule: the run differs from the main one by its setting alone.
    assert (neutral.loss, neutral.bleu) == (result.baseline.loss, result.baseline.bleu)
    assert changed.settings == ("model.dropout=0.0", "padir.length_weight=0.5")
    assert changed.loss != result.baseline.loss
    assert Path(changed.folder).name == slug("model.dropout=0.0 padir.length_weight=0.5")
    text = "\n".join(train_ablation_section(result))
    assert "## Training ablation (validation)" in text and "`log_every=7` (fp32) |" in text
    assert "| +0.00 |" in text  # the neutral variant's change


def test_settings_that_cannot_compare_are_refused_before_training(
    corpus: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    cfg = load_reproduce_config("smoke", settings(corpus, "train_ablation.variants=[]"))
    run_reproduce(
        cfg, out, ["data", "teacher", "distill", "padir"], progress=False, log=lambda _m: None
    )
    with pytest.raises(GmlmError, match=r"train_ablation\.variants is empty"):
        run_reproduce(cfg, out, ["train_ablation"], progress=False, log=lambda _m: None)
    for bad, message in (
        ("train_ablation.steps=15", r"steps=15: give a positive multiple of .* \(10\)"),
        ("train_ablation.steps=30", r"no validation at step 30"),
    ):
        cfg = load_reproduce_config(
            "smoke", settings(corpus, f"train_ablation.variants=['{NEUTRAL}']", bad)
        )
        with pytest.raises(GmlmError, match=message):
            run_reproduce(cfg, out, ["train_ablation"], progress=False, log=lambda _m: None)
    assert not (out / "train_ablation").exists()  # nothing trained


def test_variants_parse_and_name_their_folders() -> None:
    assert variant_overrides("model.relative_bias=false  padir.stages=3") == (
        "model.relative_bias=false",
        "padir.stages=3",
    )
    for bad in ("", "dropout", "=1"):
        with pytest.raises(GmlmError, match="space-separated key=value"):
            variant_overrides(bad)
    assert (
        slug("model.dropout=0.1 padir.length_weight=1") == "model.dropout=0.1_padir.length_weight=1"
    )


def test_a_bad_variant_fails_before_the_first_stage(corpus: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    for variant, message in (
        ("model.bogus=1", r"'model\.bogus=1': unknown config key 'model\.bogus'"),
        ("model.dropout=2", r"model\.dropout=2 must be in \[0, 1\)"),
    ):
        cfg = load_reproduce_config(
            "smoke", settings(corpus, f"train_ablation.variants=[{variant}]")
        )
        with pytest.raises(GmlmError, match=message):
            run_reproduce(cfg, out, progress=False, log=lambda _m: None)
        assert not (out / "stages").exists() and not (out / "data").exists()  # none ran
