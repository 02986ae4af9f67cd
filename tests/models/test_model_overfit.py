"""Both models must memorise a handful of reversal pairs in a few seconds, and run in bf16."""

import pytest
import torch

from gmlm.models import (
    AutoregressiveModel,
    PadirModel,
    autoregressive_loss,
    initial_hypothesis,
    padir_loss,
)
from tests.helpers.reversal import CONFIG, PAD, reversal_pairs

pytestmark = pytest.mark.usefixtures("one_thread")


@torch.no_grad()
def greedy(model: AutoregressiveModel, src: torch.Tensor, steps: int) -> torch.Tensor:
    cache = model.start_cache(model.encode(src))
    tokens = torch.full((src.shape[0], 1), CONFIG.bos_id)
    out = []
    for _ in range(steps):
        logits, cache = model.decode_step(tokens, cache)
        tokens = logits[:, -1].argmax(-1, keepdim=True)
        out.append(tokens)
    return torch.cat(out, dim=1)


def test_autoregressive_model_memorises_reversal() -> None:
    torch.manual_seed(0)
    src, tgt = reversal_pairs()
    model = AutoregressiveModel(CONFIG)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(200):
        optimizer.zero_grad()
        loss = autoregressive_loss(model, src, tgt).total
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    decoded = greedy(model.eval(), src, tgt.shape[1])
    real = tgt != PAD
    assert torch.equal(decoded[real], tgt[real])


def test_padir_memorises_reversal_and_refines_from_random_tokens() -> None:
    torch.manual_seed(0)
    src, tgt = reversal_pairs()
    model = PadirModel(CONFIG)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        optimizer.zero_grad()
        loss = padir_loss(model, src, tgt, stages=2, generator=generator).total
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1
    model.eval()
    with torch.no_grad():
        enc = model.encode(src)
        lengths = model.predict_lengths(enc, top_b=1)[:, 0]
        assert torch.equal(lengths, (tgt != PAD).sum(1))
        hyp = initial_hypothesis(lengths, CONFIG, torch.Generator().manual_seed(1))
        padding = hyp == PAD
        for _ in range(4):
            hyp = model.decode(enc, hyp).logits.argmax(-1).masked_fill(padding, PAD)
    assert torch.equal(hyp, tgt[:, : hyp.shape[1]])


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_bf16_autocast_forward_and_backward_run_on_cpu(kind: str) -> None:
    torch.manual_seed(0)
    src, tgt = reversal_pairs(4)
    model = AutoregressiveModel(CONFIG) if kind == "ar" else PadirModel(CONFIG)

    def loss_value() -> torch.Tensor:
        if isinstance(model, AutoregressiveModel):
            return autoregressive_loss(model, src, tgt).total
        return padir_loss(model, src, tgt, generator=torch.Generator().manual_seed(0)).total

    reference = loss_value()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = loss_value()
        if isinstance(model, PadirModel):
            logits, _ = model(src, tgt)
            assert logits.dtype == torch.bfloat16
    low.backward()
    assert torch.isfinite(low)
    assert abs(low.item() - reference.item()) < 0.05 * reference.item()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
