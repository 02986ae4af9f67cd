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
