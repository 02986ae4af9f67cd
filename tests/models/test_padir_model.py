import pytest
import torch

from gmlm.errors import GmlmError
from gmlm.models import PadirModel, initial_hypothesis, padir_loss
from gmlm.models.padir import POSITIONS_KEPT, DecoderPositions, ordinary_argmax
from gmlm.nn import ModelConfig, preset
from tests.helpers.reversal import reversal_pairs

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = preset("tiny", vocab_size=40)
EOS, PAD = CONFIG.eos_id, CONFIG.pad_id


def make_model(config: ModelConfig = CONFIG, seed: int = 0) -> PadirModel:
    torch.manual_seed(seed)
    model = PadirModel(config).eval()
    # Larger random weights than the initialisation, so that attention is far from uniform
    # and a wrong mask or cache changes the logits by far more than the tolerances.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def sources() -> torch.Tensor:
    return torch.tensor([[7, 8, 9, 10, EOS], [11, 12, EOS, PAD, PAD]])


def hypotheses() -> torch.Tensor:
    return torch.tensor([[20, 21, 22, 23, EOS], [24, 25, EOS, PAD, PAD]])


@torch.no_grad()
def test_decoder_is_not_causal() -> None:
    model = make_model()
    hyp = hypotheses()
    changed = hyp.clone()
    changed[0, 3] = 30
    before, _ = model(sources(), hyp)
    after, _ = model(sources(), changed)
    assert not torch.allclose(before[0, :3], after[0, :3], atol=1e-4)
    torch.testing.assert_close(before[1], after[1])


@torch.no_grad()
def test_padding_does_not_change_real_positions() -> None:
    model = make_model()
    src, hyp = sources(), hypotheses()
    logits, lengths = model(src, hyp)
    padded_logits, padded_lengths = model(
        torch.cat([src, torch.full((2, 3), PAD)], dim=1),
        torch.cat([hyp, torch.full((2, 4), PAD)], dim=1),
    )
    real = hyp != PAD
    torch.testing.assert_close(padded_logits[:, :5][real], logits[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(padded_lengths, lengths, atol=1e-5, rtol=0)


@torch.no_grad()
def test_positional_attention_alone_tells_positions_apart() -> None:
    config = preset("tiny", vocab_size=40, decoder_positions=False)
    hyp = torch.tensor([[20, 21, 20, 21, 20, 21, EOS]])
    src = torch.tensor([[7, 8, EOS]])
    with_attention, _ = make_model(config)(src, hyp)
    # The same token with the same neighbours: only position can separate 0, 2 and 4.
    assert not torch.allclose(with_attention[0, 0], with_attention[0, 2], atol=1e-4)
    ablated = preset("tiny", vocab_size=40, positional_attention=False)
    assert not torch.allclose(make_model(ablated)(src, hyp)[0], make_model()(src, hyp)[0])


@torch.no_grad()
def test_length_prediction_shapes_and_top_b_order() -> None:
    model = make_model()
    enc = model.encode(sources())
    assert enc.memory.shape == (2, 5, CONFIG.d_model) and enc.length_state.shape == (2, 32)
    logits = model.length_logits(enc)
    assert logits.shape == (2, CONFIG.max_target_len)
    lengths = model.predict_lengths(enc, top_b=5)
    assert lengths.shape == (2, 5)
    assert torch.equal(lengths[:, 0], logits.argmax(-1) + 1)
    chosen = logits.gather(1, lengths - 1)
    assert torch.all(chosen[:, :-1] >= chosen[:, 1:])
    assert torch.equal(
        model.predict_lengths(enc, CONFIG.max_target_len).sort(-1).values[0],
        torch.arange(1, CONFIG.max_target_len + 1),
    )
    with pytest.raises(GmlmError, match="top_b"):
        model.predict_lengths(enc, top_b=0)


@torch.no_grad()
def test_precomputed_memory_selected_rows_and_attention_maps() -> None:
    model = make_model()
    enc = model.encode(sources())
    rows = torch.tensor([0, 0, 1])
    hyp = hypotheses()[rows]
    direct = model.decode(enc.select(rows), hyp)
    memory = model.cross_memory(enc).select(rows)
    out = model.decode(memory, hyp, return_attention=True)
    torch.testing.assert_close(out.logits, direct.logits, atol=1e-5, rtol=0)
    assert out.self_attention is not None and out.cross_attention is not None
    assert out.self_attention.shape == (3, CONFIG.n_heads, 5, 5)
    assert out.cross_attention.shape == (3, CONFIG.n_heads, 5, 5)
    torch.testing.assert_close(out.cross_attention.sum(-1), torch.ones(3, CONFIG.n_heads, 5))
    assert torch.all(out.self_attention[2, :, :, 3:] == 0)
    assert torch.all(out.cross_attention[2, :, :, 3:] == 0)


def test_initial_hypothesis_layout() -> None:
    lengths = torch.tensor([3, 1, 5])
    hyp = initial_hypothesis(lengths, CONFIG, torch.Generator().manual_seed(0))
    assert hyp.shape == (3, 5)
    assert hyp[:, :][torch.arange(3), lengths - 1].tolist() == [EOS, EOS, EOS]
    assert hyp[0, 3:].tolist() == [PAD, PAD] and hyp[1, 1:].tolist() == [PAD] * 4
    words = torch.cat([hyp[0, :2], hyp[2, :4]])
    assert torch.all((words >= CONFIG.n_special) & (words < CONFIG.vocab_size))
    again = initial_hypothesis(lengths, CONFIG, torch.Generator().manual_seed(0))
    assert torch.equal(hyp, again)
    masked = initial_hypothesis(lengths, CONFIG, mode="mask")
    assert masked[2].tolist() == [CONFIG.mask_id] * 4 + [EOS]
    with pytest.raises(GmlmError, match=">= 1"):
        initial_hypothesis(torch.tensor([2, 0]), CONFIG)


BIASED = preset(
    "tiny", vocab_size=40, relative_bias=True, relative_buckets=8, relative_max_distance=4
)


@torch.no_grad()
def test_relative_bias_enters_self_attention_and_positional_attention() -> None:
    model = make_model(BIASED)
    assert model.self_attention_bias is not None and model.positional_attention_bias is not None
    logits, _ = model(sources(), hypotheses())
    for table in (model.self_attention_bias.table, model.positional_attention_bias.table):
        saved = table.weight.clone()
        table.weight.zero_()
        changed, _ = model(sources(), hypotheses())
        table.weight.copy_(saved)
        assert not torch.allclose(changed, logits, atol=1e-3)
    # Zero tables are no bias at all: the model without it, same other weights.
    plain = PadirModel(preset("tiny", vocab_size=40)).eval()
    plain.load_state_dict(model.state_dict(), strict=False)
    model.self_attention_bias.table.weight.zero_()
    model.positional_attention_bias.table.weight.zero_()
    torch.testing.assert_close(
        model(sources(), hypotheses())[0], plain(sources(), hypotheses())[0], atol=1e-6, rtol=0
    )


@torch.no_grad()
def test_relative_bias_respects_padding_and_both_attention_paths_agree() -> None:
    model = make_model(BIASED)
    src, hyp = sources(), hypotheses()
    logits, _ = model(src, hyp)
    padded, _ = model(src, torch.cat([hyp, torch.full((2, 4), PAD)], dim=1))
    real = hyp != PAD
    torch.testing.assert_close(padded[:, :5][real], logits[real], atol=1e-5, rtol=0)
    # return_attention runs the last layer on the explicit softmax instead of the fused kernel.
    explicit = model.decode(model.encode(src), hyp, return_attention=True)
    torch.testing.assert_close(explicit.logits, logits, atol=1e-5, rtol=0)
    assert explicit.self_attention is not None
    totals = explicit.self_attention.sum(-1).transpose(1, 2)[real]  # (real positions, H)
    torch.testing.assert_close(totals, torch.ones(8, BIASED.n_heads))


def test_padir_with_relative_bias_instead_of_absolute_decoder_positions_learns() -> None:
    # The authors' decoder: positions enter through positional attention and the relative
    # bias only. Reversal needs positions, so learning it shows the bias trains.
    torch.manual_seed(0)
    config = preset("tiny", vocab_size=20, relative_bias=True, decoder_positions=False)
    src, tgt = reversal_pairs()
    model = PadirModel(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = padir_loss(model, src, tgt, generator=generator).total
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # Measured over torch seeds 0-2: 7.1-7.6 at the start, 0.32-0.73 after 60 steps.
    assert losses[-1] < 0.2 * losses[0]
    assert model.self_attention_bias is not None
    assert model.self_attention_bias.table.weight.grad is not None


@pytest.mark.parametrize(
    "config",
    [CONFIG, BIASED, preset("tiny", vocab_size=40, positional_attention=False, relative_bias=True)],
    ids=["absolute", "relative-bias", "no-positional-attention"],
)
def test_positions_made_once_decode_exactly_as_positions_made_per_pass(
    config: ModelConfig,
) -> None:
    """Refinement makes each width's positions once, with every layer's positional attention
    queries and keys, and reuses them for every pass; the logits must not change at all."""
    model = make_model(config)
    src, hyp = sources(), hypotheses()
    memory = model.cross_memory(model.encode(src))
    with torch.no_grad():
        fresh = model.decode(memory, hyp)
        known = model.positions(hyp.shape[1], project=True)
        assert (known.positional_qk is None) == (not config.positional_attention)
        reused = [model.decode(memory, hyp, positions=known) for _ in range(2)]
        explicit = model.decode(memory, hyp, positions=known, return_attention=True)
    for out in reused:
        assert torch.equal(out.logits, fresh.logits)
    torch.testing.assert_close(explicit.logits, fresh.logits, atol=1e-5, rtol=0)


def test_folded_padding_trains_the_relative_bias_as_before() -> None:
    """The relative biases with the padding folded in once per pass (DecoderPositions.masked)
    give the loss and gradients of masking the padding in every layer."""
    model = make_model(BIASED).train()
    src, tgt = sources(), hypotheses()
    torch.manual_seed(1)  # the same dropout masks in both runs
    generator = torch.Generator().manual_seed(0)
    loss = padir_loss(model, src, tgt, stages=2, generator=generator).total
    loss.backward()
    folded = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    # Reference: the same model with relative_bias switched off in the decode step only,
    # so every layer masks the padding itself and adds the unfolded bias.
    original = PadirModel.decode

    def unfolded(self, memory, hyp, padding_mask=None, return_attention=False, positions=None):  # type: ignore[no-untyped-def]
        self.config.relative_bias = False
        try:
            return original(
                self, memory, hyp, padding_mask, return_attention, self.positions(hyp.shape[1])
            )
        finally:
            self.config.relative_bias = True

    PadirModel.decode = unfolded  # type: ignore[method-assign]
    try:
        torch.manual_seed(1)
        generator = torch.Generator().manual_seed(0)
        reference = padir_loss(model, src, tgt, stages=2, generator=generator).total
        reference.backward()
    finally:
        PadirModel.decode = original  # type: ignore[method-assign]
    assert (
        torch.equal(loss.detach(), reference.detach()) or abs(loss.item() - reference.item()) < 1e-6
    )
    for name, p in model.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(folded[name], p.grad, atol=1e-6, rtol=1e-5, msg=name)
    assert model.self_attention_bias is not None
    assert model.self_attention_bias.table.weight.grad is not None
    assert model.self_attention_bias.table.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ordinary_argmax_takes_the_first_of_tied_maxima(dtype: torch.dtype) -> None:
    """Ties are common in bf16 logits: the lowest ordinary id wins, as argmax's would."""
    g = torch.Generator().manual_seed(0)
    # Integer-valued logits in a narrow range: many positions have tied maxima.
    logits = torch.randint(0, 4, (3, 7, CONFIG.vocab_size), generator=g).to(dtype)
    logits[..., : CONFIG.n_special] = 9.0  # special ids would win everywhere
    content = torch.ones(3, 7, dtype=torch.bool)
    content[:, -1] = False
    is_eos = ~content
    tokens = ordinary_argmax(logits, content, is_eos, CONFIG)
    ordinary = logits[..., CONFIG.n_special :].float()
    is_max = ordinary == ordinary.amax(-1, keepdim=True)
    assert int(is_max.sum(-1).min()) > 1  # every position is a tie
    first = is_max.int().argmax(-1) + CONFIG.n_special  # first True
    assert torch.equal(tokens[:, :-1], first[:, :-1])
    assert torch.all(tokens[:, -1] == EOS)


def _same_positions(a: DecoderPositions, b: DecoderPositions) -> bool:
    tensors = [(a.table, b.table), (a.self_bias, b.self_bias)]
    tensors += [(a.positional_bias, b.positional_bias)]
    assert a.positional_qk is not None and b.positional_qk is not None
    pairs = zip(a.positional_qk, b.positional_qk, strict=True)
    tensors += [pair for qa, qb in pairs for pair in zip(qa, qb, strict=True)]
    return all(torch.equal(x, y) for x, y in tensors if x is not None and y is not None)


def test_inference_positions_are_kept_until_a_weight_they_use_changes() -> None:
    model = make_model(BIASED).eval()
    with torch.no_grad():
        kept = model.positions(7, project=True)
        assert model.positions(7, project=True) is kept  # made once, then reused
        assert _same_positions(kept, model._make_positions(7, project=True))
        for name, weight in (
            ("positional query", model.layers[1].positional.attn.q_proj.weight),
            ("relative bias", model.self_attention_bias.table.weight),  # type: ignore[union-attr]
            ("position table", model.target_positions.table.weight),
        ):
            weight.add_(0.5)  # in place, as an optimizer step: the version counter moves
            again = model.positions(7, project=True)
            assert again is not kept and not _same_positions(again, kept), name
            assert _same_positions(again, model._make_positions(7, project=True)), name
            kept = again
    with torch.inference_mode():  # a copy in another dtype: new weights, new positions
        half = make_model(BIASED).eval().to(torch.bfloat16)
        assert half.positions(7, project=True).table.dtype == torch.bfloat16
    # Training (gradients on) makes them afresh every time.
    assert model.positions(7, project=True) is not model.positions(7, project=True)


def test_at_most_positions_kept_widths_are_kept_least_recently_used_out() -> None:
    model = make_model(BIASED).eval()
    with torch.no_grad():
        first = model.positions(1, project=True)
        for width in range(2, POSITIONS_KEPT + 1):
            model.positions(width, project=True)
        assert model.positions(1, project=True) is first  # used again: now the newest
        model.positions(POSITIONS_KEPT + 1, project=True)  # drops width 2, the oldest
        assert model.positions(1, project=True) is first
        assert len(model._kept_positions) == POSITIONS_KEPT
        assert 2 not in model._kept_positions
