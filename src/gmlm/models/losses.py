"""Training objectives: teacher-forced cross-entropy (AR) and PaDIR's multi-stage loss.

Targets are right-padded ``y_1 .. y_n EOS pad ..`` (B, T). Token losses are means over the
non-pad target positions of the batch (every position, EOS included, weighs the same).

PaDIR's length loss is a mean over sentences, so its weight against the per-token mean
decides how hard the length head is pushed (docs/DESIGN.md section 1): the authors' code adds it
to per-token *sums* over the stages (relative weight about 1 / (stages x target length)),
fairseq's NAT models weigh it 0.1; ``length_weight=1`` (the default, kept for older runs)
weighs it about 30 times the authors' on Multi30k. :func:`total_loss` is the one place where
it is weighted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from gmlm.errors import GmlmError
from gmlm.models.autoregressive import AutoregressiveModel, teacher_forcing_input
from gmlm.models.padir import PadirModel, ordinary_argmax, random_tokens, stutter_positions
from gmlm.nn.config import ModelConfig
from gmlm.nn.layers import source_padding_mask

StageArgmax = Literal["any", "ordinary"]
StageStutterRemask = Literal["none", "previous"]
Loss = TypeVar("Loss", float, Tensor)


def total_loss(token_loss: Loss, length_loss: Loss, length_weight: float) -> Loss:
    """What training minimises, from the per-token mean of the token loss and the
    per-sentence mean of the unweighted length loss (0 for AR): token_loss + length_weight *
    length_loss.

    The one place where the length loss is weighted: :attr:`LossOutput.total` of one batch,
    and the trainer, its validation and `gmlm throughput` over many (through
    :func:`gmlm.training.objective.objective`, with the config's ``padir.length_weight``).
    """
    return token_loss + length_weight * length_loss


@dataclass
class LossOutput:
    """total: what to backpropagate for this batch alone (:func:`total_loss` for PaDIR,
    token_loss for AR).

    token_loss: mean over stages of the per-token cross-entropy (one stage for AR).
    length_loss: PaDIR's (label-smoothed) length cross-entropy, mean over sentences and not
        weighted; None for AR.
    stage_losses: each stage's token loss, in order.
    n_tokens: non-pad target tokens in the batch (for per-token averages across batches), a
        0-dim tensor on the batch's device (reading it on the host would wait for a GPU).
    """

    total: Tensor
    token_loss: Tensor
    n_tokens: Tensor
    length_loss: Tensor | None = None
    stage_losses: list[Tensor] = field(default_factory=list)


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


def next_stage_input(
    logits: Tensor,
    stage_input: Tensor,
    targets: Tensor,
    config: ModelConfig,
    *,
    argmax: StageArgmax = "any",
    stutter_remask: StageStutterRemask = "none",
) -> Tensor:
    """The next stage's input (B, T) from one stage's input (B, T) and logits (B, T, V).

    argmax "any": the argmax over the whole vocabulary, with the gold EOS and pad of the
        targets (B, T) put back where they have them. "ordinary": what an inference pass
        proposes, the best ordinary token at content positions, EOS at the last, pad after.
    stutter_remask "previous": as between inference passes, a content token equal to its
        left content neighbour is replaced by that position's token in `stage_input`.
    argmax is not differentiable, so no gradient flows from a stage's input into the
    previous stage.
    """
    content = (targets != config.pad_id) & (targets != config.eos_id)
    is_eos = targets == config.eos_id
    if argmax == "ordinary":
        hyp = ordinary_argmax(logits, content, is_eos, config)
    else:
        hyp = logits.argmax(dim=-1).masked_fill(is_eos, config.eos_id)
        hyp = hyp.masked_fill(targets == config.pad_id, config.pad_id)
    if stutter_remask == "previous":
        hyp = torch.where(stutter_positions(hyp, content), stage_input, hyp)
    return hyp


def source_mask(src: Tensor, pad_id: int, checked: bool) -> Tensor:
    """src's padding mask (B, S). Unless the caller has `checked` that every row holds a token
    (training's batches end each source in EOS, gmlm.data.batching), rows of padding alone
    raise (:func:`gmlm.nn.layers.source_padding_mask`): a host read, which a GPU waits for."""
    return src == pad_id if checked else source_padding_mask(src, pad_id)


def padir_loss(
    model: PadirModel,
    src: Tensor,
    targets: Tensor,
    *,
    stages: int = 2,
    keep_rate: float = 0.15,
    length_weight: float = 1.0,
    length_label_smoothing: float = 0.0,
    stage_argmax: StageArgmax = "any",
    stage_stutter_remask: StageStutterRemask = "none",
    label_smoothing: float = 0.0,
    generator: torch.Generator | None = None,
    sources_checked: bool = False,
) -> LossOutput:
    """Multi-stage PaDIR loss for src (B, S) and targets (B, T).

    Stage 1 decodes the noised targets; stage s + 1 decodes the argmax of stage s (taken
    without gradient, see :func:`next_stage_input` for `stage_argmax` and
    `stage_stutter_remask`), with pad and EOS positions reset to the gold pad / EOS. The
    token loss is the mean of the stage losses (the original code sums; the mean keeps the
    scale of one stage whatever `stages` is), label-smoothed by `label_smoothing`; the length
    loss, label-smoothed by `length_label_smoothing` over the max_target_len length classes,
    is added times `length_weight` (:func:`total_loss`). All stages share the
    parameters, the encoder pass and the dropout mode.

    The keywords from `stages` to `stage_stutter_remask` are the training config's `padir`
    section, field for field. `sources_checked`: see :func:`source_mask`.
    """
    if stages < 1:
        raise GmlmError(f"stages must be at least 1, got {stages}")
    config = model.config
    enc = model.encode_masked(src, source_mask(src, config.pad_id, sources_checked))
    memory = model.cross_memory(enc)
    padding_mask = targets == config.pad_id
    hyp = noise_targets(targets, config, keep_rate, generator)
    stage_losses = []
    for stage in range(stages):
        logits = model.decode(memory, hyp, padding_mask=padding_mask).logits
        stage_losses.append(token_cross_entropy(logits, targets, config.pad_id, label_smoothing))
        if stage + 1 < stages:
            hyp = next_stage_input(
                logits,
                hyp,
                targets,
                config,
                argmax=stage_argmax,
                stutter_remask=stage_stutter_remask,
            )
    token_loss = torch.stack(stage_losses).mean()
    length_loss = F.cross_entropy(
        model.length_logits(enc).float(),
        length_targets(targets, config.pad_id),
        label_smoothing=length_label_smoothing,
    )
    return LossOutput(
        total=total_loss(token_loss, length_loss, length_weight),
        token_loss=token_loss,
        length_loss=length_loss,
        stage_losses=stage_losses,
        n_tokens=(~padding_mask).sum(),
    )


def autoregressive_loss(
    model: AutoregressiveModel,
    src: Tensor,
    targets: Tensor,
    *,
    label_smoothing: float = 0.0,
    sources_checked: bool = False,
) -> LossOutput:
    """Teacher-forced cross-entropy for src (B, S) and targets (B, T); `sources_checked`: see
    :func:`source_mask`."""
    config = model.config
    enc = model.encode_masked(src, source_mask(src, config.pad_id, sources_checked))
    logits = model.decode(enc, teacher_forcing_input(targets, config)).logits
    loss = token_cross_entropy(logits, targets, config.pad_id, label_smoothing)
    return LossOutput(
        total=loss,
        token_loss=loss,
        stage_losses=[loss],
        n_tokens=(targets != config.pad_id).sum(),
    )
