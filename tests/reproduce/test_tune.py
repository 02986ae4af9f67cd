"""The tune stage of `gmlm reproduce`: PaDIR fine-tuned on the AR baseline's translations of the
training sources, its checkpoint then PaDIR's for every later stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gmlm.analysis.results import CalibrationResult
from gmlm.config import ConfigError
from gmlm.data.binarized import MANIFEST
from gmlm.errors import GmlmError
from gmlm.reproduce.config import checkpoint_dir, load_reproduce_config, stage_checkpoint
from gmlm.reproduce.pipeline import run_reproduce
from gmlm.reproduce.sections import commands_section
from gmlm.reproduce.stage_record import StageRecord
from tests.helpers.reproduce_runs import CALIBRATE, quick

# The AR baseline trained as long as the quick teacher, so that it translates (20 steps do not).
AR = "ar.overrides=[max_steps=100,valid_every=50,valid_sentences=5]"
TUNE = ["tune.enabled=true", "tune.beam=2", "tune.overrides=[max_steps=10,valid_every=10]"]
UP_TO_CALIBRATION = ("data", "teacher", "distill", "ar", "ar1", "padir", "tune", "calibrate")


def test_off_by_default_it_changes_nothing(tmp_path):
    cfg = load_reproduce_config("multi30k")
    assert not cfg.tune.enabled
    assert checkpoint_dir(cfg, tmp_path, "padir") == tmp_path / "padir" / "averaged"
    assert "tune-distill" not in "\n".join(commands_section(cfg, tmp_path))


def test_a_tuned_padir_is_the_one_the_later_stages_calibrate_and_use(corpus, tmp_path):
    out = tmp_path / "run"
    cfg = load_reproduce_config(
        "smoke", quick(corpus, AR, *CALIBRATE, *TUNE, "theory.enabled=false")
    )
    messages: list[str] = []
    run_reproduce(cfg, out, UP_TO_CALIBRATION, progress=False, log=messages.append)
    padir, tuned = stage_checkpoint(cfg, out, "padir"), checkpoint_dir(cfg, out, "padir")
    assert (padir, tuned) == (out / "padir" / "best", out / "tune" / "best")
    # The AR baseline's beam-2 translations are the tuned run's data, not the teacher's.
    distilled = json.loads((out / "tune-distill" / MANIFEST).read_text())
    assert distilled != json.loads((out / "distill" / MANIFEST).read_text())
    assert f"training sources with {out / 'ar' / 'best'} (step" in "\n".join(messages)
    # The run started from the padir stage's weights, with its model and the tune overrides.
    run = yaml.safe_load((out / "tune" / "config.yaml").read_text())
    base = yaml.safe_load((out / "padir" / "config.yaml").read_text())
    assert run["init_from"] == str(padir) and run["data"] == str(out / "tune-distill")
    assert (run["max_steps"], run["model"]) == (10, base["model"])
    assert f"starting from the weights of {padir} (init_from)" in messages
    assert StageRecord.read(out / "stages" / "tune.json").summary["step"] == 10
    # Calibration chose the tuned model's length setting, in its own folder.
    calibrated = CalibrationResult.read(out / "calibrate" / "calibrate.json").models["padir"]
    assert Path(calibrated.checkpoint) == tuned
    assert not (padir / "decoding.json").exists()
    commands = "\n".join(commands_section(cfg, out))
    assert f"gmlm distill --teacher {out}/ar/best --data {out}/data --out {out}/tune-distill" in (
        commands
    )
    assert (
        f"gmlm train --config {padir}/config.yaml data={out}/tune-distill out={out}/tune "
        f"init_from={padir} max_steps=10 valid_every=10"
    ) in commands
    assert f"gmlm analyze calibrate --checkpoint {tuned} " in commands


def test_a_given_padir_checkpoint_is_tuned_from_its_own_config(tmp_path):
    cfg = load_reproduce_config("demo", ["tune.enabled=true"])
    assert checkpoint_dir(cfg, tmp_path, "padir") == tmp_path / "tune" / cfg.checkpoint
    padir = cfg.padir.checkpoint
    commands = "\n".join(commands_section(cfg, tmp_path))
    assert f"gmlm train --config {padir}/config.yaml data={tmp_path}/tune-distill" in commands


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["tune.overrides=[model.nope=1]"], r"^the tune stage .*unknown config key 'model.nope'"),
        (["tune.overrides=[max_steps=-1]"], r"^the tune stage .*max_steps"),
    ],
)
def test_bad_tune_overrides_fail_before_the_first_stage(tmp_path, overrides, message):
    cfg = load_reproduce_config("smoke", ["tune.enabled=true", *overrides])
    with pytest.raises(GmlmError, match=message):
        run_reproduce(cfg, tmp_path / "run", progress=False, log=lambda _m: None)
    assert not (tmp_path / "run" / "stages").exists()  # no stage ran


def test_a_beam_out_of_range_is_refused_when_loaded():
    with pytest.raises(ConfigError, match=r"tune\.beam"):
        load_reproduce_config("smoke", ["tune.beam=0"])


def test_the_en_de_preset_holds_the_tried_fine_tune_switched_off(tmp_path):
    cfg = load_reproduce_config("multi30k-en-de")
    assert not cfg.tune.enabled and "optim.schedule=cosine" in cfg.tune.overrides
    tried = load_reproduce_config("multi30k-en-de", ["tune.enabled=true"])
    commands = "\n".join(commands_section(tried, tmp_path))
    assert f"init_from={tmp_path}/padir/averaged max_steps=3000 optim.schedule=cosine" in commands
