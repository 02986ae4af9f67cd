import pytest
import torch

from gmlm.nn import KVCache, MultiHeadAttention, attention_mask

B, TQ, TK, D, H = 3, 5, 7, 16, 4


def make_inputs(seed: int = 0) -> tuple[MultiHeadAttention, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    return MultiHeadAttention(D, H), torch.randn(B, TQ, D), torch.randn(B, TK, D)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_returned_weights_sum_to_one_and_match_fused_kernel(causal: bool, padded: bool) -> None:
    attn, query, memory = make_inputs()
    mask = None
    if padded:
        mask = torch.zeros(B, TK, dtype=torch.bool)
        mask[0, -3:] = True
        mask[2, -1:] = True
    kv = attn.project_kv(memory)
    fused, none = attn(query, kv, key_padding_mask=mask, causal=causal)
    explicit, weights = attn(query, kv, key_padding_mask=mask, causal=causal, return_weights=True)
    assert none is None and weights is not None
    assert weights.shape == (B, H, TQ, TK)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, TQ))
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    allowed = attention_mask(TQ, TK, mask, causal, weights.device)
    if allowed is not None:
        assert torch.all(weights.masked_select(~allowed.expand_as(weights)) == 0)


def test_causal_mask_is_aligned_to_the_last_key() -> None:
    # Query i of a suffix of length TQ sits at absolute position TK - TQ + i.
    allowed = attention_mask(2, 4, None, True, torch.device("cpu"))
    assert allowed is not None
    assert allowed.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_suffix_queries_with_cached_keys_match_full_causal_attention() -> None:
    attn, _, sequence = make_inputs()
    kv = attn.project_kv(sequence)
    full, _ = attn(sequence, kv, causal=True)
    suffix, _ = attn(sequence[:, -2:], kv, causal=True)
    torch.testing.assert_close(suffix, full[:, -2:], atol=1e-6, rtol=1e-6)


def test_padded_keys_do_not_influence_the_output() -> None:
    attn, query, memory = make_inputs()
    mask = torch.zeros(B, TK, dtype=torch.bool)
    mask[:, -2:] = True
    changed = memory.clone()
    changed[:, -2:] = torch.randn(B, 2, D)
    first, _ = attn(query, attn.project_kv(memory), key_padding_mask=mask)
    second, _ = attn(query, attn.project_kv(changed), key_padding_mask=mask)
    torch.testing.assert_close(first, second)
    unmasked, _ = attn(query, attn.project_kv(changed))
    assert not torch.allclose(first, unmasked)


def test_batch_one_queries_and_keys_broadcast_over_values() -> None:
    attn, _, memory = make_inputs()
    where = torch.randn(1, TK, D)
    broadcast, _ = attn(where, attn.project_kv(where, memory))
    repeated_where = where.expand(B, -1, -1)
    repeated, _ = attn(repeated_where, attn.project_kv(repeated_where, memory))
    torch.testing.assert_close(broadcast, repeated)


def test_explicit_half_precision_training_path_matches_fused_kernel() -> None:
    attn, query, memory = make_inputs()
    mask = torch.zeros(B, TK, dtype=torch.bool)
    mask[1, -4:] = True
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            fused, _ = attn(query, attn.project_kv(memory), key_padding_mask=mask, causal=True)
        explicit, _ = attn(query, attn.project_kv(memory), key_padding_mask=mask, causal=True)
    explicit.float().sum().backward()
    torch.testing.assert_close(explicit.float(), fused.float(), atol=2e-2, rtol=2e-2)
    assert attn.q_proj.weight.grad is not None


def test_kv_cache_select_reorders_and_repeats_rows() -> None:
    keys = [torch.arange(3.0).view(3, 1, 1, 1).expand(3, 2, 4, 5)]
    mask = torch.tensor([[False], [True], [False]])
    cache = KVCache(keys, [k + 10 for k in keys], mask)
    picked = cache.select(torch.tensor([2, 0, 0]))
    assert picked.length == 4
    assert picked.keys[0][:, 0, 0, 0].tolist() == [2.0, 0.0, 0.0]
    assert picked.values[0][:, 0, 0, 0].tolist() == [12.0, 10.0, 10.0]
    assert picked.padding_mask is not None
    assert picked.padding_mask.flatten().tolist() == [False, False, False]
    assert KVCache().length == 0


def padding() -> torch.Tensor:
    mask = torch.zeros(B, TK, dtype=torch.bool)
    mask[0, -3:] = True
    mask[2, -1:] = True
    return mask


@pytest.mark.parametrize("batched", [False, True])
def test_bias_is_added_to_the_scaled_scores_in_both_paths(batched: bool) -> None:
    attn, query, memory = make_inputs()
    bias = torch.randn(B, H, TQ, TK) if batched else torch.randn(H, TQ, TK)
    bias.requires_grad_(True)
    kv = attn.project_kv(memory)
    fused, _ = attn(query, kv, key_padding_mask=padding(), bias=bias)
    explicit, weights = attn(query, kv, key_padding_mask=padding(), bias=bias, return_weights=True)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    # The weights by hand: softmax(q k^T / sqrt(d) + bias) over the unpadded keys.
    keys, _ = kv
    queries = attn._split_heads(attn.q_proj(query))
    scores = queries @ keys.transpose(-2, -1) / (D // H) ** 0.5 + bias
    expected = scores.masked_fill(padding()[:, None, None, :], float("-inf")).softmax(-1)
    assert weights is not None
    torch.testing.assert_close(weights, expected, atol=1e-6, rtol=1e-6)
    # The bias learns through the fused kernel as through the explicit softmax.
    (fused_grad,) = torch.autograd.grad(fused.square().sum(), bias)
    (explicit_grad,) = torch.autograd.grad(explicit.square().sum(), bias)
    torch.testing.assert_close(fused_grad, explicit_grad, atol=1e-5, rtol=1e-5)
    assert fused_grad.abs().sum() > 0


def test_a_bias_with_a_causal_mask_keeps_the_mask() -> None:
    attn, _, sequence = make_inputs()
    bias = torch.randn(H, TK, TK)
    kv = attn.project_kv(sequence)
    fused, _ = attn(sequence, kv, causal=True, bias=bias)
    explicit, weights = attn(sequence, kv, causal=True, bias=bias, return_weights=True)
    assert weights is not None
    assert torch.all(weights.triu(1) == 0)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("explicit", [False, True])
def test_attention_dropout_drops_whole_probabilities_in_training_only(explicit: bool) -> None:
    # One key: every probability is 1, so with dropout 0.5 each head's output at each query
    # is exactly 0 or 2 v; an identity output projection exposes the heads.
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H, dropout=0.5)
    with torch.no_grad():
        attn.out_proj.weight.copy_(torch.eye(D))
    query, memory = torch.randn(B, 50, D), torch.randn(B, 1, D)
    kv = attn.project_kv(memory)
    value = kv[1].transpose(1, 2).reshape(B, 1, D)  # (B, 1, D): the single key's values
    if explicit:
        # The explicit softmax also runs when training in bf16 on CPU; force it by asking
        # for the weights (which are the probabilities before dropout).
        out, weights = attn.train()(query, kv, return_weights=True)
        assert weights is not None and torch.all(weights == 1)
    else:
        out, _ = attn.train()(query, kv)
    heads = out.view(B, 50, H, D // H)
    doubled = (2 * value).view(B, 1, H, D // H).expand_as(heads)
    kept = torch.isclose(heads, doubled, atol=1e-6, rtol=1e-6).all(-1)
    dropped = (heads == 0).all(-1)
    assert torch.all(kept ^ dropped)
    # 600 coin flips: both outcomes occur, in roughly equal numbers.
    assert 200 < int(kept.sum()) < 400
    evaluated, _ = attn.eval()(query, kv)
    torch.testing.assert_close(evaluated, value.expand(B, 50, D), atol=1e-6, rtol=1e-6)


def test_stacked_qkv_at_inference_equals_three_projections_and_follows_weight_changes() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4)
    x = torch.randn(3, 5, 16)

    def separate() -> tuple[torch.Tensor, ...]:
        queries = attn._split_heads(attn.q_proj(x))
        return (queries, *attn.project_kv(x))

    with torch.no_grad():
        q, (k, v) = attn.project_qkv(x)
        assert attn._stacked is not None  # the stacked path ran
        for fused, plain in zip((q, k, v), separate(), strict=True):
            torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-6)
        # An in-place update (an optimizer step, load_state_dict) remakes the stack.
        attn.k_proj.weight.mul_(2.0)
        q, (k, v) = attn.project_qkv(x)
        torch.testing.assert_close(k, separate()[1], rtol=1e-6, atol=1e-6)
    # With gradients on, the three projections run (and the weights get gradients).
    q, (k, v) = attn.project_qkv(x)
    (q.sum() + k.sum() + v.sum()).backward()
    assert all(p.weight.grad is not None for p in (attn.q_proj, attn.k_proj, attn.v_proj))
