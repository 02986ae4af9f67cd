"""Validation during training: loss on the validation split and a quick SacreBLEU.

The loss uses a fixed noise seed (PaDIR) so that successive validations are comparable. The
BLEU decodes the first `valid_sentences` validation sources with the model's own decoder
(AR greedy, PaDIR with `valid_steps` refinement steps and 5 length candidates).
"""

from __future__ import annotations

from typing import Any

import torch

from gmlm.data.batching import BatchIterator
from gmlm.data.binarized import PreparedDataset, TranslationDataset
from gmlm.evaluation.bleu import corpus_scores
from gmlm.models import AutoregressiveModel, PadirModel
from gmlm.training.config import TrainConfig

VALID_NOISE_SEED = 12345


@torch.no_grad()
def validation_loss(
    model: AutoregressiveModel | PadirModel,
    cfg: TrainConfig,
    data: PreparedDataset,
    device: torch.device,
    dtype: torch.dtype | None,
) -> dict[str, float]:
    from gmlm.training.trainer import LossModule, autocast, objective

    loss_module = LossModule(model, cfg)
    split = TranslationDataset(data, "valid")
    batches = BatchIterator(split, cfg.max_tokens, shuffle=False, rank=0, world_size=1)
    noise = torch.Generator(device=device)
    noise.manual_seed(VALID_NOISE_SEED)
    token_sum = length_sum = tokens = sentences = 0.0
    model.eval()
    for batch in batches:
        batch = batch.to(device)
        with autocast(device, dtype):
            tok, length = loss_module(batch.src, batch.tgt, noise)
        token_sum += float(tok)
        length_sum += float(length)
        tokens += batch.tgt_tokens
        sentences += batch.size
    out = {"token_loss": token_sum / tokens}
    if cfg.kind == "padir":
        out["length_loss"] = length_sum / sentences
    out["loss"] = objective(out["token_loss"], out.get("length_loss", 0.0), cfg)
    return out


def validate(
    model: AutoregressiveModel | PadirModel,
    cfg: TrainConfig,
    data: PreparedDataset,
    device: torch.device,
    dtype: torch.dtype | None,
) -> dict[str, Any]:
    scores: dict[str, Any] = validation_loss(model, cfg, data, device, dtype)
    if cfg.valid_sentences > 0:
        from gmlm.translate import Translator

        sources = data.read_text("valid", "src")[: cfg.valid_sentences]
        references = data.read_text("valid", "tgt")[: cfg.valid_sentences]
        translator = Translator(cfg.kind, model, data.tokenizer)
        # Validation sources passed the preparation's length filter, so "error" cannot fire.
        steps = cfg.valid_steps if cfg.kind == "padir" else None
        hyps = translator.translate(sources, bf16=dtype is not None, steps=steps)
        bleu = corpus_scores(hyps, references)["bleu"]
        scores["bleu"] = bleu.score
        scores["bleu_signature"] = bleu.signature
    model.train()
    return scores
