"""A new run started from a trained checkpoint's weights (`init_from=CHECKPOINT`): fine-tuning,
e.g. on new data or with another schedule.

Only the weights come from the checkpoint: the optimizer, the schedule and the step start
afresh. The run's model must be the checkpoint's (its kind and every model setting but the
dropout rates, which change how it trains, not what its weights mean), and its data's
tokenizer the one the checkpoint was trained with, or the ids would mean other words.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from torch import nn

from gmlm.checkpoint.config import read_checkpoint_config
from gmlm.checkpoint.files import load_checkpoint_tokenizer, load_weights
from gmlm.checkpoint.loading import resolve_checkpoint
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.training.config import TrainConfig

# Model settings a fine-tuning run may change: how the model is regularized in training.
FREE_SETTINGS = ("dropout", "attention_dropout", "activation_dropout")


def load_initial_weights(model: nn.Module, cfg: TrainConfig, tokenizer: Tokenizer) -> Path:
    """Load the weights of `cfg.init_from` (a checkpoint or a run folder: its best one) into
    `model`, built from `cfg`, whose data's tokenizer is `tokenizer`; the checkpoint folder
    read. A checkpoint of another kind, shape or tokenizer is an error saying which setting
    differs."""
    folder = resolve_checkpoint(cfg.init_from)
    saved = read_checkpoint_config(folder)
    if saved.kind != cfg.kind:
        raise GmlmError(
            f"init_from={cfg.init_from}: {folder} holds a {saved.kind} model, this run trains "
            f"kind={cfg.kind}"
        )
    theirs, ours = dataclasses.asdict(saved.model), dataclasses.asdict(cfg.model)
    changed = [
        f"model.{key}={theirs[key]} (this run: {ours[key]})"
        for key in theirs
        if key not in FREE_SETTINGS and theirs[key] != ours[key]
    ]
    if changed:
        raise GmlmError(
            f"init_from={cfg.init_from}: the run's model is not the checkpoint's; set "
            + ", ".join(changed)
            + " as the checkpoint has (only the dropout rates may differ)"
        )
    if load_checkpoint_tokenizer(folder).fingerprint != tokenizer.fingerprint:
        raise GmlmError(
            f"init_from={cfg.init_from}: {folder} was trained with another tokenizer than the "
            f"one of data={cfg.data}, so its ids would mean other pieces; prepare the data "
            f"with its tokenizer (`gmlm data prepare --tokenizer {folder / 'tokenizer'}`)"
        )
    load_weights(model, folder)
    return folder
