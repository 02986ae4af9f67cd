"""Loading a checkpoint for inference: a run folder resolved to its checkpoint, the model
built from its configuration, its weights, tokenizer, decoding defaults and language pair."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gmlm.checkpoint.config import CheckpointConfig, read_checkpoint_config
from gmlm.checkpoint.decoding_defaults import read_decoding_defaults
from gmlm.checkpoint.files import load_checkpoint_tokenizer, load_weights
from gmlm.checkpoint.languages import NOT_GIVEN, Languages, checkpoint_languages
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.io import MODEL_FILE
from gmlm.models import ModelKind, build_model
from gmlm.nn.config import ModelConfig


@dataclass
class LoadedModel:
    """What inference needs: the model (eval mode), its tokenizer and its configuration,
    with what it translates (its language pair, where recorded)."""

    model: nn.Module
    tokenizer: Tokenizer
    config: CheckpointConfig
    path: Path
    decoding: dict[str, Any] = field(default_factory=dict)  # the folder's decoding.json
    languages: Languages = NOT_GIVEN

    @property
    def kind(self) -> ModelKind:
        return self.config.kind

    @property
    def model_config(self) -> ModelConfig:
        return self.config.model


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint folder, or a run folder (then its `best`, else `averaged`, else `last`)."""
    path = Path(path)
    if not path.exists():
        raise GmlmError(f"checkpoint not found: {path}")
    if (path / MODEL_FILE).is_file():
        return path
    for name in ("best", "averaged", "last"):
        if (path / name / MODEL_FILE).is_file():
            return path / name
    raise GmlmError(f"{path}: not a checkpoint (no {MODEL_FILE}) nor a run folder with one")


def load_for_inference(path: str | Path, device: str | torch.device = "cpu") -> LoadedModel:
    """Load a checkpoint (or a run folder's best one) for translation, in eval mode."""
    ckpt = resolve_checkpoint(path)
    cfg = read_checkpoint_config(ckpt)
    tokenizer = load_checkpoint_tokenizer(ckpt)
    model = build_model(cfg.kind, cfg.model)
    load_weights(model, ckpt)
    model.to(device).eval()
    decoding = read_decoding_defaults(ckpt, cfg.kind, cfg.model)
    return LoadedModel(model, tokenizer, cfg, ckpt, decoding, checkpoint_languages(ckpt))
