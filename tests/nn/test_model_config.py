import dataclasses
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from gmlm.config import ConfigError, from_dict, load_config
from gmlm.errors import GmlmError
from gmlm.memory import MemoryLimitError
from gmlm.models import AutoregressiveModel, ModelKind, PadirModel, build_model, weight_bytes
from gmlm.nn import ModelConfig, PositionEmbedding, count_parameters, preset
from gmlm.nn.layers import source_padding_mask
from gmlm.training.config import TrainConfig


def parameters_of(kind: ModelKind, config: ModelConfig) -> int:
    # Meta tensors: sizes without allocating or initialising the weights.
    with torch.device("meta"):
        model = build_model(kind, config)
    assert isinstance(model, AutoregressiveModel if kind == "ar" else PadirModel)
    return count_parameters(model)


def test_small_preset_has_the_intended_size() -> None:
    config = preset("small", vocab_size=8000)
    ar, padir = parameters_of("ar", config), parameters_of("padir", config)
    assert 10e6 < ar < padir < 20e6
    # PaDIR adds per-layer positional attention (4 D^2 + 2 D for its LayerNorm) and the
    # length table (max_target_len x D) to the same architecture.
    d = config.d_model
    extra = config.n_decoder_layers * (4 * d * d + 2 * d) + config.max_target_len * d + d
    assert padir - ar == extra


def test_base_padir_matches_the_paper_size_with_a_32k_vocabulary() -> None:
    # The paper reports 67M parameters for this size.
    assert 66e6 < parameters_of("padir", preset("base", vocab_size=32000)) < 68e6


def test_shallow_decoder_variant_and_positional_attention_ablation_are_smaller() -> None:
    config = preset("tiny", vocab_size=100)
    assert parameters_of("ar", preset("tiny", vocab_size=100, n_decoder_layers=1)) < parameters_of(
        "ar", config
    )
    ablated = preset("tiny", vocab_size=100, positional_attention=False)
    d = config.d_model
    removed = config.n_decoder_layers * (4 * d * d + 2 * d)
    assert parameters_of("padir", config) - parameters_of("padir", ablated) == removed


def test_tied_embeddings_count_once() -> None:
    tied, untied = (
        preset("tiny", vocab_size=100),
        preset("tiny", vocab_size=100, tie_embeddings=False),
    )
    difference = parameters_of("ar", untied) - parameters_of("ar", tied)
    assert difference == 2 * 100 * tied.d_model


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"n_heads": 5}, "not divisible"),
        ({"eos_id": 0}, "distinct"),
        ({"length_id": 7}, "n_special"),
        ({"vocab_size": 6}, "no ordinary tokens"),
        ({"dropout": 1.0}, "dropout"),
        ({"attention_dropout": 1.0}, "model.attention_dropout"),
        ({"activation_dropout": -0.1}, "model.activation_dropout"),
        ({"relative_buckets": 5}, "model.relative_buckets must be even"),
        ({"relative_buckets": 2}, "model.relative_buckets=2 must be between 4 and 1024 \\(even"),
        ({"relative_max_distance": 8}, "model.relative_max_distance=8 must exceed"),
        ({"n_decoder_layers": 0}, "n_decoder_layers"),
        ({"widht": 3}, "unknown config key 'model.widht'"),
    ],
)
def test_invalid_configs_are_rejected_with_the_field_named(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        preset("tiny", **overrides)


def test_unknown_preset_and_config_file_keys_are_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown preset 'huge'; available presets: base, "):
        preset("huge")
    with pytest.raises(ConfigError, match="unknown config key"):
        from_dict(ModelConfig, {"d_modle": 3})
    assert from_dict(ModelConfig, {"d_model": 256, "init_hypothesis": "mask"}).d_model == 256


def test_padir_needs_some_decoder_position_information() -> None:
    with pytest.raises(ConfigError, match="no position information"):
        PadirModel(
            preset("tiny", vocab_size=50, positional_attention=False, decoder_positions=False)
        )
    # The relative bias alone is a position signal.
    PadirModel(
        preset(
            "tiny",
            vocab_size=50,
            positional_attention=False,
            decoder_positions=False,
            relative_bias=True,
        )
    )


def test_relative_bias_adds_one_table_per_attention_kind_and_is_padir_only() -> None:
    config = preset("tiny", vocab_size=50)
    biased = preset("tiny", vocab_size=50, relative_bias=True, relative_buckets=16)
    # (buckets x heads) for self-attention and for positional attention, shared by the layers.
    table = 16 * config.n_heads
    assert parameters_of("padir", biased) - parameters_of("padir", config) == 2 * table
    no_positional = preset("tiny", vocab_size=50, relative_bias=True, positional_attention=False)
    ablated = preset("tiny", vocab_size=50, positional_attention=False)
    assert parameters_of("padir", no_positional) - parameters_of("padir", ablated) == 32 * 2
    with pytest.raises(ConfigError, match="relative_bias is a PaDIR option"):
        AutoregressiveModel(biased)


def test_too_long_inputs_and_empty_sources_raise_clear_errors() -> None:
    positions = PositionEmbedding(4, 8, "model.max_target_len")
    assert positions(2, offset=2).shape == (2, 8)
    with pytest.raises(GmlmError, match=r"5 tokens .*model.max_target_len"):
        positions(3, offset=2)
    with pytest.raises(GmlmError, match=r"rows \[1\]"):
        source_padding_mask(torch.tensor([[7, 3], [0, 0]]), pad_id=0)


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_state_dict_round_trips_through_safetensors(kind: ModelKind, tmp_path: Path) -> None:
    # safetensors refuses tensors shared between keys, so a tied table must appear once.
    torch.manual_seed(0)
    config = preset("tiny", vocab_size=50)
    model = build_model(kind, config)
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    torch.manual_seed(1)
    restored = build_model(kind, config)
    restored.load_state_dict(load_file(tmp_path / "model.safetensors"))
    src = torch.tensor([[7, 8, config.eos_id]])
    tgt = torch.tensor([[9, 10, config.eos_id]])
    expected, actual = model.eval()(src, tgt), restored.eval()(src, tgt)
    first = expected[0] if isinstance(expected, tuple) else expected
    second = actual[0] if isinstance(actual, tuple) else actual
    torch.testing.assert_close(first, second, atol=0, rtol=0)


@pytest.mark.parametrize("name", ["tiny", "small", "base"])
def test_model_presets_are_the_training_presets_model_sections(name: str) -> None:
    """One source for model sizes: `preset(name)` is what `gmlm train --config NAME-padir`
    builds (the builders this replaced had drifted: tiny's max_source_len 32 against 64)."""
    trained = load_config(TrainConfig, f"{name}-padir").model  # vocab_size 0: the tokenizer's
    assert preset(name) == dataclasses.replace(trained, vocab_size=ModelConfig.vocab_size)


@pytest.mark.parametrize(
    ("kind", "overrides"),
    [
        ("ar", {}),
        ("padir", {}),
        ("ar", {"tie_embeddings": False}),
        ("padir", {"relative_bias": True}),
    ],
)
def test_the_weight_estimate_is_a_close_lower_bound(kind: ModelKind, overrides: dict) -> None:
    config = preset("small", vocab_size=8000, **overrides)
    actual = 4 * parameters_of(kind, config)
    assert 0.95 * actual <= weight_bytes(kind, config) <= actual


def test_a_model_beyond_the_free_memory_is_refused_before_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("gmlm.memory.available_bytes", lambda device="cpu": 2**30)
    config = preset("base", d_model=8192, d_ff=32768, vocab_size=8000)
    assert weight_bytes("padir", config) > 2**34
    with pytest.raises(
        MemoryLimitError,
        match=r"^the weights of a model with d_model=8192, d_ff=32768, 6\+6 layers and a "
        r"vocabulary of 8000 needs about [\d.]+ GiB of memory, but 1\.0 GiB is available; "
        r"lower the model's sizes \(model\.d_model",
    ):
        build_model("padir", config)
