"""The attention and activation dropout rates: active in training, off in evaluation, and at
rate 0 (the default) the model of before."""

import pytest
import torch

from gmlm.models import ModelKind, build_model, teacher_forcing_input
from gmlm.nn import preset

CONFIG = preset("tiny", vocab_size=40)  # residual dropout 0 too, so only the rate under test acts
EOS, PAD = CONFIG.eos_id, CONFIG.pad_id
SRC = torch.tensor([[7, 8, 9, 10, EOS], [11, 12, EOS, PAD, PAD]])
TGT = torch.tensor([[20, 21, 22, EOS], [23, EOS, PAD, PAD]])


def logits(model: torch.nn.Module, kind: ModelKind) -> torch.Tensor:
    if kind == "ar":
        return model(SRC, teacher_forcing_input(TGT, CONFIG))
    return model(SRC, TGT)[0]


@pytest.mark.parametrize("kind", ["ar", "padir"])
@pytest.mark.parametrize("setting", ["attention_dropout", "activation_dropout"])
def test_dropout_rate_acts_in_training_only(kind: ModelKind, setting: str) -> None:
    torch.manual_seed(0)
    plain = build_model(kind, CONFIG)
    noisy = build_model(kind, preset("tiny", vocab_size=40, **{setting: 0.3}))
    noisy.load_state_dict(plain.state_dict())
    with torch.no_grad():
        reference = logits(plain.eval(), kind)
        # Rate 0 everywhere: training mode computes exactly what evaluation does.
        torch.testing.assert_close(logits(plain.train(), kind), reference, atol=0, rtol=0)
        torch.testing.assert_close(logits(noisy.eval(), kind), reference, atol=0, rtol=0)
        first, second = logits(noisy.train(), kind), logits(noisy.train(), kind)
    real = TGT != PAD
    assert not torch.allclose(first[real], reference[real], atol=1e-3)
    assert not torch.allclose(first[real], second[real], atol=1e-3)
