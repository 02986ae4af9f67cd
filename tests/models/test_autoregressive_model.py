import torch

from gmlm.models import AutoregressiveModel, teacher_forcing_input
from gmlm.nn import preset

CONFIG = preset("tiny", vocab_size=40)
EOS, PAD, BOS = CONFIG.eos_id, CONFIG.pad_id, CONFIG.bos_id


def make_model(seed: int = 0) -> AutoregressiveModel:
    torch.manual_seed(seed)
    model = AutoregressiveModel(CONFIG).eval()
    # Larger random weights than the initialisation, so that attention is far from uniform
    # and a wrong mask or cache changes the logits by far more than the tolerances.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    return model


def sources() -> torch.Tensor:
    return torch.tensor([[7, 8, 9, 10, EOS], [11, 12, EOS, PAD, PAD], [13, EOS, PAD, PAD, PAD]])


@torch.no_grad()
def test_cached_steps_match_full_recomputation_and_greedy_tokens_agree() -> None:
    model = make_model()
    src = sources()
    enc = model.encode(src)
    cache = model.start_cache(enc)
    cached_prefix = torch.full((3, 1), BOS)
    full_prefix = cached_prefix.clone()
    step_input = cached_prefix
    for _ in range(8):
        step_logits, cache = model.decode_step(step_input, cache)
        full_logits = model.decode(enc, full_prefix).logits
        torch.testing.assert_close(step_logits[:, -1], full_logits[:, -1], atol=1e-5, rtol=0)
        step_input = step_logits[:, -1].argmax(-1, keepdim=True)
        cached_prefix = torch.cat([cached_prefix, step_input], dim=1)
        full_prefix = torch.cat([full_prefix, full_logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert cache.length == 8
    assert torch.equal(cached_prefix, full_prefix)


@torch.no_grad()
def test_selecting_cache_rows_continues_the_selected_sentences() -> None:
    model = make_model(1)
    src = sources()
    prefix = torch.tensor([[BOS, 20, 21], [BOS, 22, 23], [BOS, 24, 25]])
    _, cache = model.decode_step(prefix, model.start_cache(model.encode(src)))
    rows = torch.tensor([2, 0, 0])
    next_tokens = torch.tensor([[30], [31], [32]])
    step_logits, _ = model.decode_step(next_tokens, cache.select(rows))
    expected = model(src[rows], torch.cat([prefix[rows], next_tokens], dim=1))
    torch.testing.assert_close(step_logits[:, -1], expected[:, -1], atol=1e-5, rtol=0)


@torch.no_grad()
def test_decoder_is_causal() -> None:
    model = make_model()
    tgt_in = torch.tensor([[BOS, 9, 10, 11, 12, 13]] * 3)
    changed = tgt_in.clone()
    changed[:, 3] = 30
    before, after = model(sources(), tgt_in), model(sources(), changed)
    torch.testing.assert_close(before[:, :3], after[:, :3])
    assert not torch.allclose(before[:, 3:], after[:, 3:])


@torch.no_grad()
def test_source_padding_does_not_change_logits() -> None:
    model = make_model()
    src = sources()
    padded = torch.cat([src, torch.full((3, 4), PAD)], dim=1)
    tgt_in = torch.tensor([[BOS, 9, 10]] * 3)
    torch.testing.assert_close(model(src, tgt_in), model(padded, tgt_in), atol=1e-5, rtol=0)


@torch.no_grad()
def test_returned_attention_has_per_head_shapes_and_leaves_logits_unchanged() -> None:
    model = make_model()
    enc = model.encode(sources())
    tgt_in = torch.tensor([[BOS, 9, 10, 11]] * 3)
    out = model.decode(enc, tgt_in, return_attention=True)
    assert out.self_attention is not None and out.cross_attention is not None
    assert out.self_attention.shape == (3, CONFIG.n_heads, 4, 4)
    assert out.cross_attention.shape == (3, CONFIG.n_heads, 4, 5)
    assert torch.all(out.self_attention.triu(1) == 0)
    assert torch.all(out.cross_attention[2, :, :, 2:] == 0)
    torch.testing.assert_close(out.logits, model.decode(enc, tgt_in).logits, atol=1e-5, rtol=0)


def test_teacher_forcing_input_shifts_right_and_keeps_padding() -> None:
    targets = torch.tensor([[9, 10, EOS], [11, EOS, PAD]])
    assert teacher_forcing_input(targets, CONFIG).tolist() == [[BOS, 9, 10], [BOS, 11, PAD]]
