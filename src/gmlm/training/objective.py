"""What training minimises, shared by the trainer, validation and the throughput benchmark.

`LossModule` computes one micro-batch's summed losses (what DDP needs to see) and `objective`
turns the per-token and per-sentence means into the number training minimises: the config's
`padir.length_weight` given to :func:`gmlm.models.losses.total_loss`, the one place where the
length loss is weighted. Both live here, below the trainer and the validation, so that
neither imports the other.
"""

from __future__ import annotations

import dataclasses
from typing import cast

import torch
from torch import Tensor, nn

from gmlm.models import autoregressive_loss, losses, padir_loss
from gmlm.models.autoregressive import AutoregressiveModel
from gmlm.models.losses import Loss
from gmlm.models.padir import PadirModel
from gmlm.training.config import TrainConfig

COMPILE_BACKEND = "inductor"
"""torch.compile's backend for ``compile=true`` (torch's default; the tests use aot_eager,
which needs no C compiler)."""


def loss_module(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    """The :class:`LossModule` of `model` that training runs: compiled by torch.compile with
    ``cfg.compile`` (:data:`COMPILE_BACKEND`), the model's weights shared either way."""
    module = LossModule(model, cfg)
    if not cfg.compile:
        return module
    return cast(nn.Module, torch.compile(module, backend=COMPILE_BACKEND))


def objective(token_loss: Loss, length_loss: Loss, cfg: TrainConfig) -> Loss:
    """What training minimises, from the per-token mean of the token loss and the per-sentence
    mean of the length loss (0 for AR): :func:`gmlm.models.losses.total_loss` with the
    config's padir.length_weight."""
    return losses.total_loss(token_loss, length_loss, cfg.padir.length_weight)


class LossModule(nn.Module):
    """Wraps a model so that `forward` returns summed losses (what DDP needs to see)."""

    def __init__(self, model: nn.Module, cfg: TrainConfig) -> None:
        super().__init__()
        self.model = model
        self.cfg = cfg

    def forward(
        self, src: Tensor, tgt: Tensor, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor]:
        """(summed token loss, summed unweighted length loss) of one micro-batch."""
        if isinstance(self.model, PadirModel):
            out = padir_loss(
                self.model,
                src,
                tgt,
                **dataclasses.asdict(self.cfg.padir),
                label_smoothing=self.cfg.label_smoothing,
                generator=generator,
                sources_checked=True,  # every source ends in EOS (gmlm.data.batching)
            )
        else:
            assert isinstance(self.model, AutoregressiveModel)
            out = autoregressive_loss(
                self.model,
                src,
                tgt,
                label_smoothing=self.cfg.label_smoothing,
                sources_checked=True,  # every source ends in EOS (gmlm.data.batching)
            )
        token_sum = out.token_loss * out.n_tokens
        length_sum = (
            out.length_loss * src.shape[0]
            if out.length_loss is not None
            else token_sum.new_zeros(())
        )
        return token_sum, length_sum
