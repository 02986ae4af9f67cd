"""Tiny checkpoints on disk for the distillation and benchmark tests."""

from __future__ import annotations

from pathlib import Path

import torch

from gmlm.checkpoint.files import fill_inference_files, write_checkpoint_dir
from gmlm.data.tokenizer import Tokenizer
from gmlm.models import build_model
from gmlm.nn import preset
from gmlm.training.config import TrainConfig


def write_checkpoint(
    folder: Path, kind: str, tokenizer: Tokenizer, seed: int = 0, data: str = "", **model: object
) -> Path:
    """An untrained tiny `kind` model with `tokenizer`, saved as a checkpoint folder whose
    config.yaml names `data` as its training data (default: none).

    Untied embeddings: an untied untrained model does not just copy its input, so its
    outputs differ from sentence to sentence."""
    config = preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        max_source_len=64,
        max_target_len=64,
        tie_embeddings=False,
        **model,
    )
    torch.manual_seed(seed)
    network = build_model(kind, config)  # type: ignore[arg-type]
    cfg = TrainConfig(kind=kind, model=config, data=data)  # type: ignore[arg-type]
    write_checkpoint_dir(
        folder,
        lambda tmp: fill_inference_files(tmp, network, cfg, tokenizer, {"step": 123}),
    )
    return folder
