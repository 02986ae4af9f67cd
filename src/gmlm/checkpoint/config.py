"""What inference reads of a checkpoint's config.yaml: the model's kind and configuration.

The file holds the whole resolved training configuration that made the model
(`gmlm.training.config.TrainConfig`: training writes it, and resumes from it); inference
needs its model part only, so a loaded model carries a :class:`CheckpointConfig`, not the
data, optimizer and schedule settings of its training.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gmlm.checkpoint.meta import CONFIG_FILE
from gmlm.config import ConfigError, check_value, load_saved
from gmlm.models import ModelKind
from gmlm.nn.config import ModelConfig


@dataclass(frozen=True)
class CheckpointConfig:
    """The model's kind ("ar" or "padir") and its configuration (sizes, special token ids,
    PaDIR's options), as the checkpoint's config.yaml records them."""

    kind: ModelKind
    model: ModelConfig

    @classmethod
    def from_saved(cls, data: Mapping[str, Any]) -> CheckpointConfig:
        """The `kind` and `model` sections of a saved training configuration, checked as the
        training configuration's loader checks them; the other sections are training's."""
        missing = [key for key in ("kind", "model") if key not in data]
        if missing:
            raise ConfigError(
                f"no {' or '.join(missing)} key: a checkpoint's config names its model's kind "
                "and holds its model section"
            )
        return cls(
            kind=check_value(data["kind"], ModelKind, "kind"),
            model=check_value(data["model"], ModelConfig, "model"),
        )


def read_checkpoint_config(folder: Path) -> CheckpointConfig:
    """The model configuration saved in checkpoint folder `folder`; errors name the file."""
    return load_saved(Path(folder) / CONFIG_FILE, CheckpointConfig.from_saved)


def recorded_training_data(folder: Path) -> Path | None:
    """The prepared dataset the checkpoint in `folder` was trained on, as its config.yaml
    records it (training's `data` setting, a path as given to `gmlm train`), or None where it
    records none (a checkpoint written by hand). Inference does not need it: it tells what
    the model learnt to translate (the dataset's manifest names the languages), where that
    folder is still there."""
    data = load_saved(Path(folder) / CONFIG_FILE, lambda saved: saved.get("data"))
    return Path(data) if isinstance(data, str) and data else None
