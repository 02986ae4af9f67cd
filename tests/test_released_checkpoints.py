"""The Multi30k checkpoints committed under checkpoints/multi30k-de-en/ (docs/RESULTS.md):
they load as the right kinds, hold bf16 weights under the 80 MB budget, and translate."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gmlm
from gmlm.models import teacher_forcing_input
from gmlm.training.checkpoint import MODEL_FILE, load_for_inference, load_tensors

RELEASED = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-de-en"
SOURCES = [
    "Ein Mann fährt Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau mit einem roten Hut sitzt auf einer Bank.",
]


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_released_checkpoint_loads_and_translates(kind: str) -> None:
    folder = RELEASED / kind
    tensors = load_tensors(folder / MODEL_FILE)
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    translator = gmlm.load(folder, device="cpu")
    assert translator.kind == kind
    outputs = translator.translate(SOURCES)
    assert len(outputs) == len(SOURCES) and all(o.strip() for o in outputs)
    # A trained model, not noise: the obvious content words come through.
    joined = " ".join(outputs).lower()
    assert sum(word in joined for word in ("man", "dogs", "snow", "woman", "hat", "bench")) >= 4


def test_released_checkpoints_fit_the_budget() -> None:
    total = sum(f.stat().st_size for f in RELEASED.rglob("*") if f.is_file())
    assert total < 80 * 10**6, f"{total / 1e6:.1f} MB"


# Token ids of three random "sentences" and targets (EOS = 3, pad = 0), and what the released
# weights gave for them under the code before the issue-16 settings existed (commit e03ec76):
# the log-probability of each target token, teacher-forced (AR) or decoded in parallel from
# the targets themselves (PaDIR), and PaDIR's length log-probability of each target length.
# The new settings' defaults must keep these outputs: on the machine of the change they were
# bit-identical (torch.equal); the tolerance covers other CPUs' float rounding and the 4
# decimals written here.
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
GOLDEN_TOKEN_LOG_PROBS = {
    "ar": [
        [-12.6036, -8.5661, -10.4788, -12.0421, -11.3452, -11.2393, -8.9429],
        [-10.1336, -7.3408, -10.3376, -9.8697, -7.661, -9.4803, -9.4773],
        [-10.7054, -10.2096, -8.4076, -9.9533, -11.4449, -9.8053, -12.5378],
    ],
    "padir": [
        [-7.5614, -10.1124, -4.0572, -7.7229, -8.454, -10.5362, -0.0958],
        [-9.0666, -6.4987, -6.9844, -11.1378, -0.08, -10.3162, -10.3385],
        [-6.4519, -8.9944, -7.7699, -8.8725, -8.413, -10.8124, -0.0966],
    ],
}
GOLDEN_LENGTH_LOG_PROBS = [-2.1529, -14.1746, -4.2323]


@pytest.mark.parametrize("kind", ["ar", "padir"])
@torch.no_grad()
def test_released_checkpoints_give_the_outputs_they_gave_before_the_new_settings(
    kind: str,
) -> None:
    loaded = load_for_inference(RELEASED / kind)
    config = loaded.model_config
    assert (config.attention_dropout, config.activation_dropout, config.relative_bias) == (
        0.0,
        0.0,
        False,
    )
    src, tgt = torch.tensor(GOLDEN_SRC), torch.tensor(GOLDEN_TGT)
    if kind == "ar":
        logits = loaded.model(src, teacher_forcing_input(tgt, config))
    else:
        logits, length_logits = loaded.model(src, tgt)
        lengths = length_logits.log_softmax(-1)[torch.arange(3), (tgt != config.pad_id).sum(1) - 1]
        torch.testing.assert_close(
            lengths, torch.tensor(GOLDEN_LENGTH_LOG_PROBS), atol=2e-4, rtol=0
        )
    log_probs = logits.log_softmax(-1).gather(2, tgt.unsqueeze(2)).squeeze(2)
    expected = torch.tensor(GOLDEN_TOKEN_LOG_PROBS[kind])
    torch.testing.assert_close(log_probs, expected, atol=2e-4, rtol=0)
