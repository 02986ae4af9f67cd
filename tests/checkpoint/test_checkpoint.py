"""The checkpoint format as inference reads it: the model part of the saved training config,
and an export that copies the inference files as they are."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gmlm.checkpoint.config import CheckpointConfig, read_checkpoint_config
from gmlm.checkpoint.export import export_checkpoint
from gmlm.checkpoint.loading import load_for_inference
from gmlm.config import ConfigError
from gmlm.training.checkpoint import read_config
from tests.helpers.released_golden import RELEASED


@pytest.mark.parametrize("name", ["ar", "ar1", "padir"])
def test_inference_reads_the_model_part_of_the_shipped_configs(name: str) -> None:
    """The shipped checkpoints' config.yaml (a whole training config) gives inference the
    kind and model that training reads from it."""
    trained = read_config(RELEASED / name)
    assert read_checkpoint_config(RELEASED / name) == CheckpointConfig(trained.kind, trained.model)


def test_inference_needs_no_training_section(tmp_path: Path) -> None:
    """The data, optimizer and schedule settings are training's: a config without them, or
    with a section a later training version added, still loads for inference."""
    saved = yaml.safe_load((RELEASED / "padir" / "config.yaml").read_text())
    folder = tmp_path / "c"
    folder.mkdir()
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({"kind": "padir", "model": saved["model"], "new": {"a": 1}}))
    assert read_checkpoint_config(folder) == read_checkpoint_config(RELEASED / "padir")
    config.write_text(yaml.safe_dump({"kind": "padir", "optim": saved["optim"]}))
    with pytest.raises(ConfigError, match=rf"^{config}: no model key: .*restore it"):
        read_checkpoint_config(folder)
    config.write_text(yaml.safe_dump({"kind": "padir", "model": {**saved["model"], "d_ff": 0}}))
    with pytest.raises(ConfigError, match=rf"^{config}: model.d_ff=0 must be"):
        read_checkpoint_config(folder)


def test_a_loaded_model_carries_its_checkpoint_config() -> None:
    loaded = load_for_inference(RELEASED / "ar1")
    assert loaded.config == read_checkpoint_config(RELEASED / "ar1") and loaded.kind == "ar"


def test_an_export_copies_config_and_decoding_defaults_as_they_are(tmp_path: Path) -> None:
    out = export_checkpoint(RELEASED / "padir", tmp_path / "x", None)
    for name in ("config.yaml", "decoding.json", "tokenizer/tokenizer.model"):
        assert (out / name).read_bytes() == (RELEASED / "padir" / name).read_bytes(), name
