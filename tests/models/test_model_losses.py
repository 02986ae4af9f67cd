import math

import pytest
import torch

from gmlm.errors import GmlmError
from gmlm.models import (
    AutoregressiveModel,
    PadirModel,
    autoregressive_loss,
    length_targets,
    next_stage_input,
    noise_targets,
    padir_loss,
    teacher_forcing_input,
    token_cross_entropy,
)
from gmlm.nn import tiny

CONFIG = tiny(vocab_size=40)
EOS, PAD = CONFIG.eos_id, CONFIG.pad_id
SRC = torch.tensor([[7, 8, 9, 10, EOS], [11, 12, EOS, PAD, PAD]])
TGT = torch.tensor([[20, 21, 22, EOS], [23, EOS, PAD, PAD]])


def manual_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    log_probs = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    real = targets != PAD
    return -log_probs[real].sum() / real.sum()


def random_targets(rows: int, width: int, vocab: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(CONFIG.n_special, vocab, (rows, width), generator=g)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    positions = torch.arange(width)
    targets[positions == (lengths - 1).unsqueeze(1)] = EOS
    targets[positions > (lengths - 1).unsqueeze(1)] = PAD
    return targets


def test_noising_keeps_eos_and_padding_and_draws_only_ordinary_tokens() -> None:
    config = tiny(vocab_size=1000)
    targets = random_targets(2000, 50, 1000, seed=0)
    noised = noise_targets(
        targets, config, keep_rate=0.15, generator=torch.Generator().manual_seed(1)
    )
    protected = (targets == EOS) | (targets == PAD)
    assert torch.equal(noised[protected], targets[protected])
    assert torch.all(noised[~protected] >= config.n_special)
    assert torch.all(noised[~protected] < config.vocab_size)
    # A replacement may hit the gold token by chance: P(correct) = 0.15 + 0.85 / 994.
    expected = 0.15 + 0.85 / (config.vocab_size - config.n_special)
    n = int((~protected).sum())
    observed = float((noised[~protected] == targets[~protected]).float().mean())
    tolerance = 5 * math.sqrt(expected * (1 - expected) / n)  # five standard errors, ~0.004
    assert abs(observed - expected) < tolerance


def test_noising_is_seeded_and_mask_mode_uses_the_mask_token() -> None:
    targets = random_targets(20, 10, CONFIG.vocab_size, seed=3)
    first = noise_targets(targets, CONFIG, generator=torch.Generator().manual_seed(5))
    second = noise_targets(targets, CONFIG, generator=torch.Generator().manual_seed(5))
    assert torch.equal(first, second)
    masked = noise_targets(targets, CONFIG, keep_rate=0.0, mode="mask")
    ordinary = (targets != EOS) & (targets != PAD)
    assert torch.all(masked[ordinary] == CONFIG.mask_id)
    assert torch.equal(noise_targets(targets, CONFIG, keep_rate=1.0), targets)
    with pytest.raises(GmlmError, match="keep_rate"):
        noise_targets(targets, CONFIG, keep_rate=1.5)


def test_length_targets_count_eos_and_start_at_zero() -> None:
    assert length_targets(TGT, PAD).tolist() == [3, 1]


def test_single_stage_loss_is_token_cross_entropy_plus_length_loss() -> None:
    torch.manual_seed(0)
    model = PadirModel(CONFIG)
    out = padir_loss(model, SRC, TGT, stages=1, generator=torch.Generator().manual_seed(7))
    noised = noise_targets(TGT, CONFIG, generator=torch.Generator().manual_seed(7))
    logits, length_logits = model(SRC, noised)
    token = manual_cross_entropy(logits, TGT)
    length = -length_logits.log_softmax(-1)[[0, 1], [3, 1]].mean()
    torch.testing.assert_close(out.token_loss, token)
    assert out.length_loss is not None
    torch.testing.assert_close(out.length_loss, length)
    torch.testing.assert_close(out.total, token + length)
    assert len(out.stage_losses) == 1 and out.n_tokens == 6


def test_second_stage_decodes_the_first_stage_argmax_with_eos_and_padding_restored() -> None:
    torch.manual_seed(0)
    model = PadirModel(CONFIG)
    out = padir_loss(model, SRC, TGT, stages=2, generator=torch.Generator().manual_seed(7))
    noised = noise_targets(TGT, CONFIG, generator=torch.Generator().manual_seed(7))
    enc = model.encode(SRC)
    first = model.decode(enc, noised).logits
    stage_two_input = first.argmax(-1)
    stage_two_input[TGT == EOS] = EOS
    stage_two_input[TGT == PAD] = PAD
    second = model.decode(enc, stage_two_input, padding_mask=TGT == PAD).logits
    torch.testing.assert_close(out.stage_losses[0], manual_cross_entropy(first, TGT))
    torch.testing.assert_close(out.stage_losses[1], manual_cross_entropy(second, TGT))
    torch.testing.assert_close(out.token_loss, (out.stage_losses[0] + out.stage_losses[1]) / 2)


def test_next_stage_input_is_the_argmax_with_gold_eos_and_padding() -> None:
    logits = torch.zeros(2, 4, CONFIG.vocab_size)
    logits[..., 30] = 1.0
    logits[0, 1, 31] = 2.0
    assert next_stage_input(logits, TGT, CONFIG).tolist() == [
        [30, 31, 30, EOS],
        [30, EOS, PAD, PAD],
    ]


def test_label_smoothing_mixes_in_the_uniform_distribution() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 4, CONFIG.vocab_size)
    smoothed = token_cross_entropy(logits, TGT, PAD, label_smoothing=0.1)
    real = TGT != PAD
    uniform_part = -logits.log_softmax(-1)[real].mean(-1).mean()
    expected = 0.9 * manual_cross_entropy(logits, TGT) + 0.1 * uniform_part
    torch.testing.assert_close(smoothed, expected)


def test_autoregressive_loss_is_teacher_forced_cross_entropy() -> None:
    torch.manual_seed(0)
    model = AutoregressiveModel(CONFIG)
    out = autoregressive_loss(model, SRC, TGT)
    logits = model(SRC, teacher_forcing_input(TGT, CONFIG))
    torch.testing.assert_close(out.total, manual_cross_entropy(logits, TGT))
    assert out.length_loss is None and out.n_tokens == 6
