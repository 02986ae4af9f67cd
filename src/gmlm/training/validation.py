"""Validation during training: loss on the validation split and a quick SacreBLEU.

Both score the pairs the binarized valid split kept, nothing else: the data preparation drops
empty pairs and pairs longer than its `max_len` from the binarized rows (the text files keep
them, as evaluation references), and a model whose maximum is that `max_len` cannot take
those. The loss uses every kept pair, with a fixed noise seed (PaDIR) so that successive
validations are comparable. The BLEU decodes the source ids of the first `valid_sentences`
kept pairs with the translate function it is given (the trainer's: the model being trained,
AR greedy, PaDIR with `valid_steps` refinement steps and 5 length candidates) and scores them
against those pairs' reference lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from gmlm.data.batching import BatchIterator
from gmlm.data.binarized import PreparedDataset, TranslationDataset
from gmlm.evaluation.bleu import corpus_scores
from gmlm.models import AutoregressiveModel, PadirModel
from gmlm.training.config import TrainConfig
from gmlm.training.objective import LossModule, objective
from gmlm.training.precision import autocast

VALID_NOISE_SEED = 12345

# Source ids (no EOS) -> their translations, detokenized, one line each.
TranslateIds = Callable[[list[list[int]]], list[str]]


@dataclass(frozen=True)
class ValidationPairs:
    """The valid pairs the BLEU check decodes: the first rows of the binarized split.

    `sources` are token ids without EOS, `references` the cleaned text lines of the same pairs.
    `pairs` counts every pair of the split's text, `kept` its binarized rows; `dropped` says
    why the preparation dropped the others ({reason: count}, from stats.json).
    """

    sources: list[list[int]]
    references: list[str]
    kept: int
    pairs: int
    dropped: dict[str, int]

    @property
    def skipped(self) -> int:
        """Valid pairs no validation sees: the ones the data preparation dropped."""
        return self.pairs - self.kept

    def describe(self) -> str:
        """One line for the training log."""
        line = f"validation: loss on the {self.kept:,} kept valid pairs"
        if self.sources:
            line += f", BLEU on the first {len(self.sources):,}"
        if not self.skipped:
            return line
        reasons = ", ".join(f"{n:,} {r}" for r, n in self.dropped.items() if n)
        return (
            f"{line}; {self.skipped:,} of the {self.pairs:,} valid pairs skipped, as the data "
            f"preparation dropped them ({reasons or 'see stats.json'})"
        )


def validation_pairs(data: PreparedDataset, limit: int) -> ValidationPairs:
    """The first `limit` kept pairs of the valid split (all of them when it has fewer)."""
    split = data.split("valid")
    references = data.read_text("valid", "tgt")
    rows = range(min(max(limit, 0), len(split)))
    valid = data.stats().splits.get("valid")
    dropped = {} if valid is None else valid.dropped
    return ValidationPairs(
        sources=[split[i][0].tolist() for i in rows],
        references=[references[int(split.lines[i])] for i in rows],
        kept=len(split),
        pairs=len(references),
        dropped=dict(dropped),
    )


@torch.no_grad()
def validation_loss(
    model: AutoregressiveModel | PadirModel,
    cfg: TrainConfig,
    data: PreparedDataset,
    device: torch.device,
    dtype: torch.dtype | None,
) -> dict[str, float]:
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
    translate: TranslateIds,
    pairs: ValidationPairs | None = None,
) -> dict[str, Any]:
    """Validation loss, and the BLEU of `translate`'s translations of `pairs` (default:
    `validation_pairs(data, cfg.valid_sentences)`) unless `cfg.valid_sentences` is 0."""
    scores: dict[str, Any] = validation_loss(model, cfg, data, device, dtype)
    if cfg.valid_sentences > 0:
        pairs = pairs or validation_pairs(data, cfg.valid_sentences)
        # The training arithmetic (autocast), not an inference copy of the model.
        with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            hyps = translate(pairs.sources)
        bleu = corpus_scores(hyps, pairs.references)["bleu"]
        scores["bleu"] = bleu.score
        scores["bleu_signature"] = bleu.signature
    model.train()
    return scores
