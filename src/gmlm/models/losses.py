"""Training objectives: teacher-forced cross-entropy (AR) and PaDIR's multi-stage loss.

Targets are right-padded ``y_1 .. y_n EOS pad ..`` (B, T). Token losses are means over the
non-pad target positions of the batch (every position, EOS included, weighs the same).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from gmlm.errors import GmlmError
from gmlm.models.autoregressive import AutoregressiveModel, teacher_forcing_input
from gmlm.models.padir import PadirModel, random_tokens
from gmlm.nn.config import ModelConfig


@dataclass
class LossOutput:
    """total: what to backpropagate (token_loss + length_loss for PaDIR, token_loss for AR).

    token_loss: mean over stages of the per-token cross-entropy (one stage for AR).
    length_loss: PaDIR's length cross-entropy (mean over sentences), None for AR.
    stage_losses: each stage's token loss, in order.
    n_tokens: non-pad target tokens in the batch (for per-token averages across batches).
    """

    total: Tensor
    token_loss: Tensor
    length_loss: Tensor | None = None
    stage_losses: list[Tensor] = field(default_factory=list)
    n_tokens: int = 0


def token_cross_entropy(
    logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float = 0.0
) -> Tensor:
    """Mean cross-entropy of logits (B, T, V) against targets (B, T) over non-pad targets."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        targets.flatten(),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


def length_targets(targets: Tensor, pad_id: int) -> Tensor:
    """(B,) class index of each target's length: non-pad tokens (EOS included) minus one."""
    return (targets != pad_id).sum(dim=1) - 1


def noise_targets(
    targets: Tensor,
    config: ModelConfig,
    keep_rate: float = 0.15,
    generator: torch.Generator | None = None,
    mode: Literal["random", "mask"] | None = None,
) -> Tensor:
    """PaDIR's training input X(0), (B, T): each target token is kept with probability
    `keep_rate`, otherwise replaced by a uniformly random ordinary token (or [MASK] with
    ``mode="mask"``; default ``config.init_hypothesis``). EOS and pad are never replaced.

    A random replacement can equal the gold token, so the fraction of correct noised tokens
    is keep_rate + (1 - keep_rate) / (vocab_size - n_special).
    """
    if not 0.0 <= keep_rate <= 1.0:
        raise GmlmError(f"keep_rate must be in [0, 1], got {keep_rate}")
    mode = config.init_hypothesis if mode is None else mode
    draw_device = generator.device if generator is not None else torch.device("cpu")
    uniform = torch.rand(targets.shape, generator=generator, device=draw_device)
    keep = uniform.to(targets.device) < keep_rate
    keep |= (targets == config.pad_id) | (targets == config.eos_id)
    if mode == "random":
        replacement = random_tokens(tuple(targets.shape), config, generator, targets.device)
    else:
        replacement = torch.full_like(targets, config.mask_id)
    return torch.where(keep, targets, replacement)


def next_stage_input(logits: Tensor, targets: Tensor, config: ModelConfig) -> Tensor:
    """The argmax of one stage's logits (B, T, V) as the next stage's input (B, T), with the
    gold EOS and pad put back where the targets (B, T) have them. argmax is not
    differentiable, so no gradient flows from a stage's input into the previous stage."""
    hyp = logits.argmax(dim=-1).masked_fill(targets == config.eos_id, config.eos_id)
    return hyp.masked_fill(targets == config.pad_id, config.pad_id)


def padir_loss(
    model: PadirModel,
    src: Tensor,
    targets: Tensor,
    *,
    stages: int = 2,
    keep_rate: float = 0.15,
    label_smoothing: float = 0.0,
    generator: torch.Generator | None = None,
) -> LossOutput:
    """Multi-stage PaDIR loss for src (B, S) and targets (B, T).

    Stage 1 decodes the noised targets; stage s + 1 decodes the argmax of stage s (taken
    without gradient), with pad and EOS positions reset to the gold pad / EOS. The token loss
    is the mean of the stage losses (the original code sums; the mean keeps the scale of
    one stage whatever `stages` is); the length loss is added unweighted. All stages share
    the parameters, the encoder pass and the dropout mode.
    """
    if stages < 1:
        raise GmlmError(f"stages must be at least 1, got {stages}")
    config = model.config
    enc = model.encode(src)
    memory = model.cross_memory(enc)
    padding_mask = targets == config.pad_id
    hyp = noise_targets(targets, config, keep_rate, generator)
    stage_losses = []
    for stage in range(stages):
        logits = model.decode(memory, hyp, padding_mask=padding_mask).logits
        stage_losses.append(token_cross_entropy(logits, targets, config.pad_id, label_smoothing))
        if stage + 1 < stages:
            hyp = next_stage_input(logits, targets, config)
    token_loss = torch.stack(stage_losses).mean()
    length_loss = F.cross_entropy(
        model.length_logits(enc).float(), length_targets(targets, config.pad_id)
    )
    return LossOutput(
        total=token_loss + length_loss,
        token_loss=token_loss,
        length_loss=length_loss,
        stage_losses=stage_losses,
        n_tokens=int((~padding_mask).sum()),
    )


def autoregressive_loss(
    model: AutoregressiveModel, src: Tensor, targets: Tensor, *, label_smoothing: float = 0.0
) -> LossOutput:
    """Teacher-forced cross-entropy for src (B, S) and targets (B, T)."""
    config = model.config
    logits = model(src, teacher_forcing_input(targets, config))
    loss = token_cross_entropy(logits, targets, config.pad_id, label_smoothing)
    return LossOutput(
        total=loss,
        token_loss=loss,
        stage_losses=[loss],
        n_tokens=int((targets != config.pad_id).sum()),
    )
