import torch

from gmlm.nn import FeedForward, RelativePositionBias, relative_buckets
from gmlm.nn.dropout import dropout


def t5_bucket(distance: int) -> int:
    """T5's published bucket table for 32 buckets, max distance 128, one direction: distances
    0-7 exact, then 8-11, 12-15, 16-22, 23-31, 32-45, 46-63, 64-90, 91+ (buckets 8 .. 15)."""
    if distance < 8:
        return distance
    for bucket, first in zip(range(8, 16), (8, 12, 16, 23, 32, 46, 64, 91), strict=True):
        if distance >= first:
            found = bucket
    return found


def test_buckets_match_the_t5_table() -> None:
    max_len = 200
    table = relative_buckets(max_len, n_buckets=32, max_distance=128)
    assert table.shape == (2 * max_len - 1,)
    for r in range(-(max_len - 1), max_len):
        # r = key - query: keys to the left (and the query itself) take the lower half.
        expected = t5_bucket(abs(r)) + (16 if r > 0 else 0)
        assert int(table[r + max_len - 1]) == expected, r


def test_buckets_of_a_small_table_by_hand() -> None:
    # 8 buckets, max distance 8: 4 per direction, distances 0 and 1 exact (exact = 2), then
    # floor(log(d / 2) / log(8 / 2) * 2): d = 2, 3 -> +0, d >= 4 -> +1 (capped).
    table = relative_buckets(6, n_buckets=8, max_distance=8)
    left = [3, 3, 2, 2, 1, 0]  # r = -5 .. 0
    right = [5, 6, 6, 7, 7]  # r = 1 .. 5
    assert table.tolist() == left + right


def test_bias_depends_only_on_the_relative_distance() -> None:
    torch.manual_seed(0)
    bias = RelativePositionBias(n_heads=3, max_len=12, n_buckets=8, max_distance=8)
    with torch.no_grad():
        bias.table.weight.normal_()
    full = bias(9)
    assert full.shape == (3, 9, 9)
    # Shifting query and key together changes nothing (a Toeplitz matrix per head) ...
    torch.testing.assert_close(full[:, 1:, 1:], full[:, :-1, :-1], atol=0, rtol=0)
    # ... so a shorter sequence sees the corners of a longer one.
    short = bias(5)
    torch.testing.assert_close(short, full[:, :5, :5], atol=0, rtol=0)
    torch.testing.assert_close(short, full[:, 4:, 4:], atol=0, rtol=0)
    # Entry [h, q, k] is the table row of the bucket of k - q.
    buckets = relative_buckets(12, 8, 8)
    for q, k in ((0, 4), (4, 0), (2, 3), (6, 6)):
        expected = bias.table.weight[buckets[k - q + 11]]
        torch.testing.assert_close(full[:, q, k], expected, atol=0, rtol=0)
    # Far distances share a bucket, nearby ones do not.
    assert torch.equal(full[:, 0, 7], full[:, 0, 8])
    assert not torch.equal(full[:, 0, 1], full[:, 0, 2])


def test_buckets_are_not_saved_with_the_weights() -> None:
    bias = RelativePositionBias(n_heads=2, max_len=4, n_buckets=8, max_distance=8)
    assert list(bias.state_dict()) == ["table.weight"]


def test_feed_forward_dropout_hits_the_activation_in_training_only() -> None:
    torch.manual_seed(0)
    ffn = FeedForward(8, 32, dropout=0.5)
    x = torch.randn(3, 5, 8)
    hidden = torch.nn.functional.gelu(ffn.up(x))
    torch.manual_seed(1)
    trained = ffn.train()(x)
    torch.manual_seed(1)
    expected = ffn.down(dropout(hidden, 0.5))
    torch.testing.assert_close(trained, expected, atol=0, rtol=0)
    assert not torch.allclose(trained, ffn.down(hidden))
    torch.testing.assert_close(ffn.eval()(x), ffn.down(hidden), atol=0, rtol=0)
