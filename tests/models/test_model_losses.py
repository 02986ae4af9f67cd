import dataclasses
import inspect
import math

import pytest
import torch

from gmlm.decoding.refinement import RefinementOptions, next_input
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
from gmlm.nn import DecoderOutput, KVCache, preset
from gmlm.training.config import PadirObjectiveConfig

CONFIG = preset("tiny", vocab_size=40)
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
    config = preset("tiny", vocab_size=1000)
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


def test_length_loss_is_weighted_and_label_smoothed_as_computed_by_hand() -> None:
    torch.manual_seed(0)
    model = PadirModel(CONFIG)
    weight, smoothing = 0.1, 0.2
    out = padir_loss(
        model,
        SRC,
        TGT,
        stages=1,
        length_weight=weight,
        length_label_smoothing=smoothing,
        label_smoothing=0.1,
        generator=torch.Generator().manual_seed(7),
    )
    noised = noise_targets(TGT, CONFIG, generator=torch.Generator().manual_seed(7))
    logits, length_logits = model(SRC, noised)
    # Smoothing spreads its mass evenly over all max_target_len = L length classes: the
    # target class gets 1 - 0.2 + 0.2 / L, every other class 0.2 / L.
    log_p = length_logits.log_softmax(-1)
    classes = CONFIG.max_target_len
    per_sentence = [
        -((1 - smoothing) * log_p[row, target] + smoothing / classes * log_p[row].sum())
        for row, target in enumerate((3, 1))
    ]
    length = torch.stack(per_sentence).mean()
    token = token_cross_entropy(logits, TGT, PAD, label_smoothing=0.1)
    assert out.length_loss is not None
    torch.testing.assert_close(out.length_loss, length)
    torch.testing.assert_close(out.token_loss, token)
    torch.testing.assert_close(out.total, token + weight * length)
    # Weight 1 without smoothing is the objective of older runs: token + plain length loss.
    old = padir_loss(model, SRC, TGT, stages=1, generator=torch.Generator().manual_seed(7))
    assert old.length_loss is not None
    plain = -log_p[[0, 1], [3, 1]].mean()
    torch.testing.assert_close(old.length_loss, plain)
    torch.testing.assert_close(old.total, old.token_loss + plain)


def test_padir_loss_takes_the_training_config_padir_section_field_for_field() -> None:
    # The trainer passes the `padir:` section as keywords; the defaults must agree too.
    keywords = inspect.signature(padir_loss).parameters
    for field in dataclasses.fields(PadirObjectiveConfig):
        assert field.name in keywords, field.name
        assert keywords[field.name].default == field.default, field.name


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
    assert next_stage_input(logits, TGT, TGT, CONFIG).tolist() == [
        [30, 31, 30, EOS],
        [30, EOS, PAD, PAD],
    ]


STAGE_INPUT = torch.tensor([[7, 8, 9, 10, 11, EOS], [12, 13, 14, EOS, PAD, PAD]])
STAGE_TARGETS = torch.tensor([[20, 21, 22, 23, 24, EOS], [25, 26, 27, EOS, PAD, PAD]])


def stage_logits(argmax: list[list[int]]) -> torch.Tensor:
    """Logits (2, 6, V) whose argmax is `argmax`, with every special id the runner-up at
    ordinary positions, and ordinary token 39 the best ordinary token where a special id wins."""
    logits = torch.zeros(2, 6, CONFIG.vocab_size)
    logits[..., : CONFIG.n_special] = 1.0
    logits[..., 39] = 0.5
    for row, tokens in enumerate(argmax):
        for position, token in enumerate(tokens):
            logits[row, position, token] = 2.0
    return logits


def test_next_stage_input_remasks_stutter_from_the_stage_input() -> None:
    # Stage 1 proposes 30 30 30 31 31 (row 0): positions 1, 2 and 4 repeat their left
    # neighbour and take back the stage's input there (8, 9, 11), as inference does.
    logits = stage_logits([[30, 30, 30, 31, 31, 30], [32, 32, 33, 33, 33, 33]])
    remasked = next_stage_input(
        logits, STAGE_INPUT, STAGE_TARGETS, CONFIG, stutter_remask="previous"
    )
    assert remasked.tolist() == [[30, 8, 9, 31, 11, EOS], [32, 13, 33, EOS, PAD, PAD]]
    assert next_stage_input(logits, STAGE_INPUT, STAGE_TARGETS, CONFIG).tolist() == [
        [30, 30, 30, 31, 31, EOS],
        [32, 32, 33, EOS, PAD, PAD],
    ]
    # The same rule as between inference passes (decoding.refinement.next_input).
    content = (STAGE_TARGETS != PAD) & (STAGE_TARGETS != EOS)
    predicted = next_stage_input(logits, STAGE_INPUT, STAGE_TARGETS, CONFIG)
    inference = next_input(
        predicted,
        torch.zeros(2, 6),
        STAGE_INPUT,
        torch.zeros_like(STAGE_INPUT),
        content,
        1,
        RefinementOptions(stutter_remask="previous"),
    )
    assert torch.equal(remasked, inference)


def test_ordinary_stage_argmax_never_proposes_special_ids() -> None:
    special = CONFIG.mask_id, CONFIG.unk_id, CONFIG.pad_id, CONFIG.bos_id, CONFIG.length_id
    logits = stage_logits([[30, special[0], special[1], 31, special[2], 30], [*special[2:], 32]])
    assert next_stage_input(logits, STAGE_INPUT, STAGE_TARGETS, CONFIG).tolist() == [
        [30, special[0], special[1], 31, special[2], EOS],
        [special[2], special[3], special[4], EOS, PAD, PAD],
    ]
    ordinary = next_stage_input(logits, STAGE_INPUT, STAGE_TARGETS, CONFIG, argmax="ordinary")
    assert ordinary.tolist() == [[30, 39, 39, 31, 39, EOS], [39, 39, 39, EOS, PAD, PAD]]
    # Random logits that favour special ids: content positions get the best ordinary token.
    torch.manual_seed(0)
    noisy = torch.randn(2, 6, CONFIG.vocab_size)
    noisy[..., : CONFIG.n_special] += 10.0
    picked = next_stage_input(noisy, STAGE_INPUT, STAGE_TARGETS, CONFIG, argmax="ordinary")
    content = (STAGE_TARGETS != PAD) & (STAGE_TARGETS != EOS)
    best = noisy[..., CONFIG.n_special :].argmax(-1) + CONFIG.n_special
    assert torch.equal(picked[content], best[content])
    assert torch.equal(picked[~content], STAGE_TARGETS[~content])


class RecordingDecoder:
    """Stands in for `model.decode`: returns fixed logits for stage 1 and records each
    stage's input, so a test can see what stage 2 was fed."""

    def __init__(self, model: PadirModel, first_logits: torch.Tensor) -> None:
        self.first_logits = first_logits
        self.inputs: list[torch.Tensor] = []
        self.decode = model.decode

    def __call__(
        self, memory: KVCache, hyp: torch.Tensor, padding_mask: torch.Tensor | None = None
    ) -> DecoderOutput:
        self.inputs.append(hyp.clone())
        out = self.decode(memory, hyp, padding_mask)
        if len(self.inputs) == 1:
            out.logits = out.logits * 0 + self.first_logits
        return out


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, [[30, 30, 30, 31, 31, EOS], [CONFIG.pad_id, 32, 33, EOS, PAD, PAD]]),
        (
            {"stage_stutter_remask": "previous"},
            [[30, "x1", "x2", 31, "x4", EOS], [CONFIG.pad_id, 32, 33, EOS, PAD, PAD]],
        ),
        (
            {"stage_argmax": "ordinary", "stage_stutter_remask": "previous"},
            [[30, "x1", "x2", 31, "x4", EOS], [39, 32, 33, EOS, PAD, PAD]],
        ),
    ],
)
def test_padir_loss_feeds_stage_two_what_inference_would(
    settings: dict[str, str], expected: list[list[object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    model = PadirModel(CONFIG)
    first = stage_logits([[30, 30, 30, 31, 31, 30], [CONFIG.pad_id, 32, 33, 33, 33, 33]])
    recorder = RecordingDecoder(model, first)
    monkeypatch.setattr(model, "decode", recorder)
    generator = torch.Generator().manual_seed(7)
    padir_loss(model, SRC, STAGE_TARGETS, stages=2, generator=generator, **settings)
    noised, second = recorder.inputs
    want = [
        [int(noised[row, int(t[1:])]) if isinstance(t, str) else t for t in tokens]
        for row, tokens in enumerate(expected)
    ]
    assert second.tolist() == want


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
