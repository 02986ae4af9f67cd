from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gmlm.data.batching import Batch, BatchIterator, cut_batches
from gmlm.data.binarized import TranslationDataset
from gmlm.errors import GmlmError


@pytest.fixture(scope="module")
def train(tiny_dataset: Path) -> TranslationDataset:
    return TranslationDataset.open(tiny_dataset, "train")


def rows(batches: list[Batch]) -> list[list[int]]:
    return [b.indices.tolist() for b in batches]


def test_batches_are_padded_with_eos_and_within_budget(train: TranslationDataset) -> None:
    batches = list(BatchIterator(train, max_tokens=300, seed=1))
    seen: list[int] = []
    for batch in batches:
        b, s = batch.src.shape
        assert batch.tgt.shape[0] == b and batch.src.dtype == torch.long
        assert b * max(s, batch.tgt.shape[1]) <= 300
        for j, row in enumerate(batch.indices.tolist()):
            src_ids, tgt_ids = train[row]
            n, m = len(src_ids), len(tgt_ids)
            assert batch.src[j, :n].tolist() == src_ids.tolist()
            assert batch.src[j, n] == train.eos_id and (batch.src[j, n + 1 :] == 0).all()
            assert batch.tgt[j, :m].tolist() == tgt_ids.tolist()
            assert batch.tgt[j, m] == train.eos_id and (batch.tgt[j, m + 1 :] == 0).all()
            assert batch.src_lengths[j] == n + 1 and batch.tgt_lengths[j] == m + 1
        assert batch.tgt_tokens == int((batch.tgt != 0).sum())
        assert batch.src_tokens == int(batch.src_lengths.sum())
        seen += batch.indices.tolist()
    assert sorted(seen) == list(range(len(train)))  # every row exactly once per epoch


def test_bucketing_groups_similar_lengths(train: TranslationDataset) -> None:
    batches = list(BatchIterator(train, max_tokens=300, seed=1))
    padded = sum(b.tgt.numel() + b.src.numel() for b in batches)
    real = sum(b.tgt_tokens + b.src_tokens for b in batches)
    assert real / padded > 0.8  # random batches of these lengths (4-13 words) waste ~35%


def test_seeded_shuffling(train: TranslationDataset) -> None:
    a = rows(list(BatchIterator(train, max_tokens=300, seed=1)))
    b = rows(list(BatchIterator(train, max_tokens=300, seed=1)))
    c = rows(list(BatchIterator(train, max_tokens=300, seed=2)))
    assert a == b and a != c
    it = BatchIterator(train, max_tokens=300, seed=1)
    epoch0, epoch1 = rows(list(it)), rows(list(it))
    assert epoch0 == a and epoch1 != a and it.epoch == 2
    # the second epoch is whole: every row once, from its first batch on
    assert epoch1 == [list(r) for r in it.plan(1)]
    assert sorted(i for b in epoch1 for i in b) == sorted(i for b in a for i in b)
    ordered = rows(list(BatchIterator(train, max_tokens=300, shuffle=False)))
    assert ordered == rows(list(BatchIterator(train, max_tokens=300, shuffle=False, seed=9)))


@pytest.mark.parametrize("stop", [0, 1, 7, -1])
def test_resume_gives_the_same_batches(train: TranslationDataset, stop: int) -> None:
    reference = BatchIterator(train, max_tokens=256, seed=3)
    stop = len(reference) if stop == -1 else stop  # -1: right after the epoch's last batch
    expected = rows(list(reference)) + rows(list(reference))  # two epochs
    first = BatchIterator(train, max_tokens=256, seed=3)
    got: list[list[int]] = []
    for batch in first if stop else ():
        got.append(batch.indices.tolist())  # a training step, then a checkpoint
        if len(got) == stop:
            break
    state = first.state_dict()
    assert state["position"] == stop
    resumed = BatchIterator(train, max_tokens=256, seed=3)
    resumed.load_state_dict(state)
    got += rows(list(resumed)) + rows(list(resumed))
    assert got == expected


def test_resume_refuses_other_settings(train: TranslationDataset, tiny_dataset: Path) -> None:
    state = BatchIterator(train, max_tokens=256, seed=3).state_dict()
    with pytest.raises(GmlmError, match="saved seed=3 but this run has seed=4"):
        BatchIterator(train, max_tokens=256, seed=4).load_state_dict(state)
    valid = TranslationDataset.open(tiny_dataset, "valid")
    with pytest.raises(GmlmError, match="saved dataset="):
        BatchIterator(valid, max_tokens=256, seed=3).load_state_dict(state)


@pytest.mark.parametrize("world_size", [2, 3])
def test_sharding_is_disjoint_and_balanced(train: TranslationDataset, world_size: int) -> None:
    single = [set(r) for r in rows(list(BatchIterator(train, max_tokens=300, seed=5)))]
    shards = [
        rows(list(BatchIterator(train, max_tokens=300, seed=5, rank=r, world_size=world_size)))
        for r in range(world_size)
    ]
    assert len({len(s) for s in shards}) == 1  # same number of steps on every rank
    covered: list[int] = []
    for step in zip(*shards, strict=True):
        parts = [set(p) for p in step]
        union = set().union(*parts)
        assert sum(map(len, parts)) == len(union)  # disjoint shares of one global batch
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
        covered += union
    assert len(covered) == len(set(covered))
    assert len(train) - len(covered) < world_size  # at most a final partial batch dropped
    assert len(shards[0]) < len(single)  # global batches hold world_size times the budget
    for r in range(world_size):
        it = BatchIterator(train, max_tokens=300, seed=5, rank=r, world_size=world_size)
        assert all(b.size * max(b.src.shape[1], b.tgt.shape[1]) <= 300 for b in it)


def test_evaluation_mode_keeps_every_row(tiny_dataset: Path) -> None:
    valid = TranslationDataset.open(tiny_dataset, "valid")
    seen = []
    for rank in range(3):
        it = BatchIterator(valid, max_tokens=128, shuffle=False, rank=rank, world_size=3)
        seen += [i for b in it for i in b.indices.tolist()]
    assert sorted(seen) == list(range(len(valid)))


@pytest.mark.parametrize("world_size", [1, 3])
def test_every_rank_knows_the_global_batch_it_shares(
    train: TranslationDataset, world_size: int
) -> None:
    # Over two epochs: at each step, every rank's totals are those of all ranks' batches of
    # that step together (what the loss is normalised by, known without communication).
    ranks = [
        BatchIterator(train, max_tokens=200, seed=3, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    steps = [list(it) + list(it) for it in ranks]
    assert len({len(s) for s in steps}) == 1 and len(steps[0]) > 4
    for together in zip(*steps, strict=True):
        tokens = sum(b.tgt_tokens for b in together)
        sentences = sum(b.size for b in together)
        assert {(b.all_tgt_tokens, b.all_size) for b in together} == {(tokens, sentences)}
        assert all(b.to("cpu").all_tgt_tokens == tokens for b in together)


def test_max_sentences_and_budget_errors(train: TranslationDataset) -> None:
    it = BatchIterator(train, max_tokens=10_000, max_sentences=16, seed=0)
    assert max(b.size for b in it) == 16
    longest = int(np.maximum(train.src_lengths, train.tgt_lengths).max()) + 1
    with pytest.raises(GmlmError, match=f"raise max_tokens to at least {longest}"):
        BatchIterator(train, max_tokens=longest - 1)
    with pytest.raises(GmlmError, match="rank 2 is not in"):
        BatchIterator(train, max_tokens=300, rank=2, world_size=2)


def test_batch_to_device(train: TranslationDataset) -> None:
    batch = next(iter(BatchIterator(train, max_tokens=300)))
    moved = batch.to("cpu")
    assert torch.equal(moved.src, batch.src) and moved.tgt_tokens == batch.tgt_tokens


def test_rank_defaults_come_from_torch_distributed(
    train: TranslationDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert BatchIterator(train, max_tokens=300).world_size == 1  # no process group
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    it = BatchIterator(train, max_tokens=300, seed=5)
    assert (it.rank, it.world_size) == (1, 2)
    explicit = BatchIterator(train, max_tokens=300, seed=5, rank=1, world_size=2)
    assert rows(list(it)) == rows(list(explicit))


def test_cut_batches_bounds_padded_tokens_and_sentences() -> None:
    # widest first; a batch's padded size is its rows summed times its widest width
    widths = [10, 9, 9, 5, 5, 5, 5, 2]
    rows = [2] * len(widths)
    cuts = cut_batches(widths, rows, max_tokens=40, max_sentences=None)
    assert [list(c) for c in cuts] == [[0, 1], [2, 3], [4, 5, 6, 7]]
    for cut in cuts:
        assert sum(rows[i] for i in cut) * max(widths[i] for i in cut) <= 40
    # a count bound alone, and both: whichever is reached first ends the batch
    assert [len(c) for c in cut_batches(widths, rows, None, 3)] == [3, 3, 2]
    assert [len(c) for c in cut_batches(widths, rows, 40, 3)] == [2, 2, 3, 1]
    # an item over the budget alone is a batch of its own; nothing is ever left out
    assert [list(c) for c in cut_batches([50, 3, 3], [1, 1, 1], 10, None)] == [[0], [1, 2]]
    assert cut_batches([], [], 10, None) == []


@pytest.mark.parametrize(("n", "kept"), [(8, 8), (9, 8), (10, 10), (11, 11)])
def test_a_final_batch_is_dropped_only_where_a_rank_would_get_no_row(n: int, kept: int) -> None:
    # 4 tokens and EOS per side: 2 rows per rank fill max_tokens=10, so a global batch of 2
    # ranks holds 4 rows and the last one n % 4; it is dropped while shuffling only when it
    # cannot give each rank a row (1 row for 2 ranks), which would leave the ranks' step
    # counts unequal.
    lengths = SimpleNamespace(src_lengths=np.full(n, 4), tgt_lengths=np.full(n, 4))
    plans = [
        BatchIterator(lengths, max_tokens=10, seed=1, rank=r, world_size=2).plan(0)  # type: ignore[arg-type]
        for r in range(2)
    ]
    assert len(plans[0]) == len(plans[1]) == -(-kept // 4)
    covered = np.concatenate([rows for plan in plans for rows in plan])
    assert len(covered) == len(set(covered.tolist())) == kept
    # without shuffling (evaluation) every row is kept
    unshuffled = [
        BatchIterator(lengths, max_tokens=10, shuffle=False, rank=r, world_size=2).plan(0)  # type: ignore[arg-type]
        for r in range(2)
    ]
    assert sum(len(rows) for plan in unshuffled for rows in plan) == n
