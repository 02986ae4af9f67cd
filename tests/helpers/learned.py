"""Tiny checkpoints that have learned something, trained in seconds: each memorises the first
PAIRS pairs of the test split of a prepared dataset (tests/conftest.py: `learned_checkpoints`
on `word_task_data`), so that every command that reads that split (`--data`) starts with
sentences the model knows.

Trained full-batch with Adam on one thread, in fp32, from a fixed seed, in a few seconds. On
those pairs (measured on one CPU; tests/training/test_learning.py holds them to bars far
below): the AR model translates every one exactly (BLEU 100); the PaDIR model predicts every
reference length (top-1), and its top lengths differ from sentence to sentence, while its
words are partly learned (BLEU 22 with the default T=4 B=5), so that its output still depends
on the initial random tokens. Sentences past the first PAIRS are
unseen: there both models are unsure, and decoding settings change their outputs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gmlm.checkpoint.files import fill_inference_files, write_checkpoint_dir
from gmlm.data.binarized import load_dataset
from gmlm.models import (
    AutoregressiveModel,
    PadirModel,
    autoregressive_loss,
    build_model,
    padir_loss,
)
from gmlm.nn import preset
from gmlm.training.config import TrainConfig

PAIRS = 32
# kind: (steps, learning rate); PaDIR trains with one stage (half the cost of two).
TRAINING = {"ar": (150, 5e-3), "padir": (150, 1e-2)}


def memorised_checkpoint(folder: Path, kind: str, data: Path, seed: int = 0) -> Path:
    """A tiny `kind` model trained on the first PAIRS test pairs of the prepared dataset
    `data`, saved as a checkpoint folder."""
    prepared = load_dataset(data)
    tokenizer = prepared.tokenizer
    config = preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        max_source_len=32,
        max_target_len=32,
        tie_embeddings=False,
    )
    pairs = [
        [tokenizer.encode(line) for line in prepared.read_text("test", side)[:PAIRS]]
        for side in ("src", "tgt")
    ]
    src, tgt = (padded(rows, config.pad_id, config.eos_id) for rows in pairs)
    steps, lr = TRAINING[kind]
    torch.manual_seed(seed)
    model = build_model(kind, config)  # type: ignore[arg-type]
    fit(model, src, tgt, steps, lr=lr, stages=1, seed=seed)
    cfg = TrainConfig(kind=kind, model=config)  # type: ignore[arg-type]
    write_checkpoint_dir(
        folder,
        lambda tmp: fill_inference_files(tmp, model, cfg, tokenizer, {"step": steps}),
    )
    return folder


def padded(rows: list[list[int]], pad: int, eos: int) -> torch.Tensor:
    """Id rows + EOS, right-padded: (len(rows), longest + 1)."""
    out = torch.full((len(rows), max(len(r) for r in rows) + 1), pad)
    for i, row in enumerate(rows):
        out[i, : len(row) + 1] = torch.tensor([*row, eos])
    return out


def fit(
    model: torch.nn.Module,
    src: torch.Tensor,
    tgt: torch.Tensor,
    steps: int,
    *,
    lr: float,
    stages: int,
    seed: int,
) -> None:
    """`steps` full-batch Adam steps of `model` on (src, tgt), on one thread (PaDIR: its
    multi-stage loss with `stages` stages, drawing from a generator seeded `seed`); then eval."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        optimizer.zero_grad()
        if isinstance(model, PadirModel):
            loss = padir_loss(model, src, tgt, stages=stages, generator=generator).total
        else:
            assert isinstance(model, AutoregressiveModel)
            loss = autoregressive_loss(model, src, tgt).total
        loss.backward()
        optimizer.step()
    torch.set_num_threads(threads)
    model.eval()
