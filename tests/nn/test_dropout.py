"""gmlm's CPU dropout: the drop rate, the scaling, the gradient and eval mode, checked on
seeded draws against what `torch.nn.functional.dropout` promises."""

from __future__ import annotations

import math

import pytest
import torch

from gmlm.models import build_model
from gmlm.nn import preset
from gmlm.nn.dropout import LEVELS, Dropout, drop_levels, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_drops_at_the_rate_and_scales_the_rest(p: float) -> None:
    torch.manual_seed(0)
    n = 400_003  # not a multiple of 4: the last random word is cut
    y = dropout(torch.ones(n), p)
    rate = drop_levels(p) / LEVELS
    assert abs(rate - p) <= 0.5 / LEVELS
    kept = y != 0
    assert torch.all(y[kept] == 1.0 / (1.0 - rate))  # every kept element scaled alike
    sigma = math.sqrt(rate * (1 - rate) / n)
    assert abs(float((~kept).float().mean()) - rate) < 5 * sigma
    # Neighbours (four numbers come from one random word) are independent: both kept at the
    # rate of two independent draws.
    both = float((kept[:-1] & kept[1:]).float().mean())
    assert abs(both - (1 - rate) ** 2) < 5 * math.sqrt((1 - rate) ** 2 / n)


def test_gradient_is_the_mask_and_shapes_are_kept() -> None:
    torch.manual_seed(1)
    x = torch.randn(3, 5, 7, requires_grad=True)
    y = dropout(x.transpose(0, 1), 0.2)  # a non-contiguous input
    assert y.shape == (5, 3, 7)
    g = torch.randn_like(y)
    y.backward(g)
    assert x.grad is not None
    mask = y / x.detach().transpose(0, 1)
    assert torch.allclose(x.grad.transpose(0, 1), g * mask)
    assert set(torch.unique(mask.round(decimals=5)).tolist()) <= {0.0, round(1 / (1 - 0.2), 5)}


def test_off_in_eval_mode_and_at_rate_zero() -> None:
    x = torch.randn(10, 10)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0) is x
    module = Dropout(0.5).eval()
    assert module(x) is x and repr(module) == "Dropout(p=0.5)"
    assert torch.equal(dropout(torch.ones(5), 1.0 - 1e-9), torch.zeros(5))  # rounds to all


def test_seeded_masks_repeat() -> None:
    torch.manual_seed(3)
    first = dropout(torch.ones(1000), 0.3)
    torch.manual_seed(3)
    assert torch.equal(first, dropout(torch.ones(1000), 0.3))


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_models_use_it(kind: str) -> None:
    model = build_model(kind, preset("tiny", vocab_size=64))
    assert not any(type(m) is torch.nn.Dropout for m in model.modules())
    assert any(isinstance(m, Dropout) for m in model.modules())
