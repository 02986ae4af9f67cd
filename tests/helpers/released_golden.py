"""The golden outputs of the checkpoints shipped under checkpoints/ (one folder per language
pair, e.g. checkpoints/multi30k-de-en/), which tests/test_released_checkpoints.py compares
against.

Run `python -m tests.helpers.released_golden` after shipping new checkpoints and paste what it
prints into that test: it records what the shipped weights give under the code of the day, so a
later change that alters a released model's outputs fails the test instead of passing silently.
"""

from __future__ import annotations

from pathlib import Path

import torch

from gmlm.checkpoint.loading import load_for_inference
from gmlm.models import teacher_forcing_input

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
# The German-English models: `make demo`'s, and those the tests of one released model use.
RELEASED = CHECKPOINTS / "multi30k-de-en"

# Token ids of three random "sentences" and targets (EOS = 3, pad = 0), within every shipped
# tokenizer's 8,000 pieces.
GOLDEN_SRC = [
    [1228, 7359, 4451, 7372, 63, 6091, 3939, 1745, 3],
    [3833, 239, 1980, 1386, 4547, 2640, 3202, 6562, 3],
    [878, 7855, 1370, 267, 3363, 3, 0, 0, 0],
]
GOLDEN_TGT = [
    [2193, 6545, 1130, 2359, 6488, 6541, 3],
    [7065, 3615, 2326, 6441, 3, 0, 0],
    [1791, 104, 3343, 6417, 7591, 7431, 3],
]


@torch.no_grad()
def released_outputs(folder: Path) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The log-probability of each golden target token, teacher-forced (AR) or decoded in
    parallel from the targets themselves (PaDIR), and for PaDIR the length log-probability of
    each target's length (None for AR)."""
    loaded = load_for_inference(folder)
    config = loaded.model_config
    src, tgt = torch.tensor(GOLDEN_SRC), torch.tensor(GOLDEN_TGT)
    lengths = None
    if loaded.kind == "padir":
        logits, length_logits = loaded.model(src, tgt)
        rows = torch.arange(len(GOLDEN_TGT))
        lengths = length_logits.log_softmax(-1)[rows, (tgt != config.pad_id).sum(1) - 1]
    else:
        logits = loaded.model(src, teacher_forcing_input(tgt, config))
    log_probs = logits.log_softmax(-1).gather(2, tgt.unsqueeze(2)).squeeze(2)
    return log_probs, lengths


def released_folders() -> list[str]:
    """The checkpoint folders shipped under CHECKPOINTS, as "PAIR/NAME" (e.g.
    "multi30k-de-en/padir"), in name order."""
    configs = CHECKPOINTS.glob("*/*/config.yaml")
    return sorted(p.parent.relative_to(CHECKPOINTS).as_posix() for p in configs)


def _rounded(values: torch.Tensor) -> list[object]:
    """The values to 4 decimals, as nested lists (what the test file holds)."""
    return [_rounded(row) if row.dim() else round(float(row), 4) for row in values]


def main() -> None:
    token_lines, length_lines = [], []
    for name in released_folders():
        log_probs, lengths = released_outputs(CHECKPOINTS / name)
        token_lines.append(f"    {name!r}: {_rounded(log_probs)},")
        if lengths is not None:
            length_lines.append(f"    {name!r}: {_rounded(lengths)},")
    print("GOLDEN_TOKEN_LOG_PROBS = {", *token_lines, "}", sep="\n")
    print("GOLDEN_LENGTH_LOG_PROBS = {", *length_lines, "}", sep="\n")


if __name__ == "__main__":
    main()
