"""The PaDIR recipe settings through the trainer: the length weight in the logged
and validated objective, weighed in one place, and a checkpoint trained with relative bias
that saves and loads it."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gmlm.checkpoint.loading import load_for_inference
from gmlm.config import ConfigError
from gmlm.io import MODEL_FILE
from gmlm.models import PadirModel, losses
from gmlm.training.checkpoint import read_config
from gmlm.training.config import load_train_config
from gmlm.training.optim import build_optimizer
from gmlm.training.throughput import measure_throughput
from gmlm.training.throughput_settings import ThroughputSettings
from gmlm.training.trainer import Trainer

RECIPE = [
    "padir.length_weight=0.25",
    "padir.length_label_smoothing=0.1",
    "padir.stage_argmax=ordinary",
    "padir.stage_stutter_remask=previous",
    "model.relative_bias=true",
    "model.decoder_positions=false",
    "model.attention_dropout=0.1",
    "model.activation_dropout=0.1",
]


def test_recipe_settings_train_and_the_checkpoint_keeps_the_relative_bias(
    word_task_data: Path, tmp_path: Path
) -> None:
    run = tmp_path / "r"
    overrides = [f"data={word_task_data}", f"out={run}", "max_steps=2", "valid_every=2"]
    fast = ["valid_sentences=0", "threads=1", "log_every=1"]
    cfg = load_train_config("tiny-padir", [*overrides, *fast, *RECIPE])
    Trainer(cfg, progress=False, log=lambda _m: None).run()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "loss" in r]
    assert len(trained) == 2
    for row in trained:
        assert row["loss"] == pytest.approx(row["token_loss"] + 0.25 * row["length_loss"])
    (valid,) = [r for r in rows if "valid_loss" in r]
    expected = valid["valid_token_loss"] + 0.25 * valid["valid_length_loss"]
    assert valid["valid_loss"] == pytest.approx(expected)

    saved = load_file(str(run / "last" / MODEL_FILE))
    tables = {"self_attention_bias.table.weight", "positional_attention_bias.table.weight"}
    assert tables <= set(saved)
    loaded = load_for_inference(run / "last")
    assert isinstance(loaded.model, PadirModel)
    saved_config = read_config(run / "last")
    assert loaded.model_config.relative_bias and saved_config.padir.length_weight == 0.25
    state = loaded.model.state_dict()
    for name in tables:
        assert torch.equal(state[name], saved[name])
        assert saved[name].abs().sum() > 0
    # Like the embedding tables, the bias tables get no weight decay.
    names = {id(p): n for n, p in loaded.model.named_parameters()}
    optimizer = build_optimizer(loaded.model, saved_config.optim)
    undecayed = {
        names[id(p)] for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]
    }
    assert tables <= undecayed


def test_the_length_loss_is_weighed_in_one_place(word_task_data: Path, tmp_path: Path, monkeypatch):
    """`gmlm.models.losses.total_loss` weighs the length loss for training, its validation
    and `gmlm throughput`: a weighting changed there changes what each of them logs and
    backpropagates."""
    weights: list[float] = []
    backpropagated: list[torch.Tensor] = []

    def weigh_seven(token_loss, length_loss, length_weight):  # type: ignore[no-untyped-def]
        weights.append(length_weight)
        total = token_loss + 7.0 * length_loss
        if isinstance(total, torch.Tensor) and total.requires_grad:
            total.register_hook(backpropagated.append)  # called when a backward pass runs
        return total

    monkeypatch.setattr(losses, "total_loss", weigh_seven)
    run = tmp_path / "r"
    overrides = [f"data={word_task_data}", f"out={run}", "max_steps=2", "valid_every=2"]
    fast = ["valid_sentences=0", "threads=1", "log_every=1", "padir.length_weight=0.25"]
    cfg = load_train_config("tiny-padir", [*overrides, *fast])
    Trainer(cfg, progress=False, log=lambda _m: None).run()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if "loss" in r]
    assert len(trained) == 2 and len(backpropagated) == 2
    for row in trained:
        assert row["loss"] == pytest.approx(row["token_loss"] + 7 * row["length_loss"])
    (valid,) = [r for r in rows if "valid_loss" in r]
    expected = valid["valid_token_loss"] + 7 * valid["valid_length_loss"]
    assert valid["valid_loss"] == pytest.approx(expected)
    assert set(weights) == {0.25}  # given the config's weight, always

    backpropagated.clear()
    measure_throughput(cfg, ThroughputSettings(steps=2, warmup=1, precisions=("fp32",)))
    assert len(backpropagated) == 3


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("padir.length_weight=-1", "padir.length_weight=-1 must be >= 0"),
        ("padir.length_weight=.nan", "padir.length_weight=nan: expected a finite number"),
        ("padir.length_label_smoothing=1.0", r"padir.length_label_smoothing=1 must be in \[0, 1\)"),
        ("padir.stage_argmax=best", "is not one of"),
        ("padir.stage_stutter_remask=initial", "is not one of"),
        ("padir.length_wieght=0.1", "unknown config key 'padir.length_wieght'"),
    ],
)
def test_bad_objective_settings_are_config_errors(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_train_config("tiny-padir", [override])


def test_old_configs_mean_the_old_objective() -> None:
    # A config saved before these settings existed (no such keys) loads with the old meaning:
    # that of the laptop run's PaDIR, released until the multi30k run's replaced it.
    cfg = read_config(Path(__file__).resolve().parents[1] / "fixtures" / "old-padir-config")
    assert (cfg.padir.length_weight, cfg.padir.length_label_smoothing) == (1.0, 0.0)
    assert (cfg.padir.stage_argmax, cfg.padir.stage_stutter_remask) == ("any", "none")
    model = cfg.model
    assert (model.attention_dropout, model.activation_dropout, model.relative_bias) == (
        0.0,
        0.0,
        False,
    )


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_the_loss_module_sums_each_loss_over_what_it_is_a_mean_of(kind: str) -> None:
    """A micro-batch's token loss summed over its target tokens and PaDIR's length loss over
    its sentences (0 for AR): the sums DDP adds up across processes before dividing."""
    from gmlm.models import autoregressive_loss, build_model, padir_loss
    from gmlm.training.objective import LossModule
    from tests.helpers.reversal import CONFIG, reversal_pairs

    cfg = load_train_config(f"tiny-{kind}", ["data=x", "out=y", "padir.length_weight=0.5"])
    torch.manual_seed(0)
    model = build_model(kind, CONFIG)
    src, tgt = (t[:3] for t in reversal_pairs(4))  # 3 sentences of width 7
    smoothing = cfg.label_smoothing
    assert src.shape[0] != src.shape[1]
    token_sum, length_sum = LossModule(model, cfg)(src, tgt, torch.Generator().manual_seed(1))
    if kind == "ar":
        out = autoregressive_loss(model, src, tgt, label_smoothing=smoothing)  # type: ignore[arg-type]
        assert length_sum.item() == 0.0
    else:
        settings = {**dataclasses.asdict(cfg.padir), "label_smoothing": smoothing}
        generator = torch.Generator().manual_seed(1)
        out = padir_loss(model, src, tgt, **settings, generator=generator)  # type: ignore[arg-type]
        assert out.length_loss is not None
        assert length_sum.item() == pytest.approx(out.length_loss.item() * 3)
    assert out.n_tokens > 3
    assert token_sum.item() == pytest.approx(out.token_loss.item() * int(out.n_tokens))
