"""Token-budget batches with length bucketing, seeded shuffling, exact resumption and sharding;
and :func:`cut_batches`, how translation cuts its sorted inputs into batches.

Each epoch is planned the same way on every rank, from `(seed, epoch)` alone:

1. sort the rows by length (the longer side plus EOS), ties broken by a seeded permutation
   (in order when `shuffle=False`), so each batch holds sentences of nearly equal length;
2. cut the sorted rows greedily into *global* batches, as large as possible such that every
   rank's share, padded, stays within `max_tokens` (and `max_sentences`);
3. shuffle the order of the global batches (training only);
4. give rank r the rows `batch[r::world_size]` of every global batch, so ranks get disjoint
   shares of similar size and the same number of steps. In training a final global batch with
   fewer rows than ranks is dropped (at most world_size - 1 rows an epoch) to keep the step
   counts equal; in evaluation (`shuffle=False`) nothing is dropped and a rank with an empty
   share skips that batch.

`state_dict()` records (epoch, batches already delivered); `load_state_dict()` restores it, so a
restarted run continues with exactly the batches the uninterrupted run would have produced.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gmlm.data.binarized import TranslationDataset
from gmlm.errors import GmlmError

STATE_VERSION = 1


@dataclass(frozen=True)
class Batch:
    """A padded batch, ready for the models.

    src: (B, S) int64, source ids followed by EOS, right-padded with pad_id.
    tgt: (B, T) int64, target ids followed by EOS, right-padded; no BOS (a decoder that needs
        one prepends it to its input: `[bos] + tgt[:-1]`).
    src_lengths, tgt_lengths: (B,) int64, non-pad lengths including the EOS.
    indices: (B,) int64, the rows of the dataset split (see `TranslationDataset.lines`).
    src_tokens, tgt_tokens: non-pad token counts (EOS included).
    all_tgt_tokens, all_size: the target tokens (EOS included) and sentences of the global
        batch that this is one process's share of (under torchrun; else this batch's own): the
        loss's normalisers, known to every process without asking the others.
    """

    src: torch.Tensor
    tgt: torch.Tensor
    src_lengths: torch.Tensor
    tgt_lengths: torch.Tensor
    indices: torch.Tensor
    src_tokens: int
    tgt_tokens: int
    all_tgt_tokens: int
    all_size: int

    @property
    def size(self) -> int:
        return int(self.src.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The batch on `device` (`indices` stay on the CPU). With `non_blocking`, a copy to a
        GPU goes from pinned memory and the host does not wait for it (a copy from pageable
        memory waits for the device's queue to drain first)."""
        pin = non_blocking and torch.device(device).type == "cuda"

        def move(t: torch.Tensor) -> torch.Tensor:
            if pin and t.device.type == "cpu":
                t = t.pin_memory()
            return t.to(device, non_blocking=non_blocking)

        return Batch(
            move(self.src),
            move(self.tgt),
            move(self.src_lengths),
            move(self.tgt_lengths),
            self.indices,
            self.src_tokens,
            self.tgt_tokens,
            self.all_tgt_tokens,
            self.all_size,
        )


def _dist_defaults(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is None or world_size is None:
        dist = torch.distributed
        active = dist.is_available() and dist.is_initialized()
        if rank is None:
            rank = dist.get_rank() if active else 0
        if world_size is None:
            world_size = dist.get_world_size() if active else 1
    if world_size < 1 or not 0 <= rank < world_size:
        raise GmlmError(f"batching: rank {rank} is not in [0, world_size={world_size})")
    return rank, world_size


def pad_rows(
    data: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, pad_id: int, eos_id: int
) -> np.ndarray:
    """(B, max(lengths) + 1) int64: each row's ids, then EOS, then padding (vectorised)."""
    width = int(lengths.max()) + 1 if len(lengths) else 1
    pos = np.arange(width)
    inside = pos[None, :] < lengths[:, None]
    gather = np.minimum(offsets[:, None] + pos[None, :], max(len(data) - 1, 0))
    out = np.where(inside, data[gather] if len(data) else 0, pad_id).astype(np.int64)
    out[np.arange(len(lengths)), lengths] = eos_id
    return out


def cut_batches(
    widths: Sequence[int],
    rows: Sequence[int],
    max_tokens: int | None,
    max_sentences: int | None,
) -> list[range]:
    """Items in decoding order (widest first) -> consecutive batches, as ranges of positions
    in that order: a batch ends before the item that would make its padded size, the rows of
    its items summed times its widest width (`widths` and `rows` per item), pass
    `max_tokens`, or its item count pass `max_sentences` (None: no bound of that kind). An
    item whose padded size alone passes `max_tokens` is a batch of its own."""
    batches: list[range] = []
    start, total, width = 0, 0, 0
    for i, (own, count) in enumerate(zip(widths, rows, strict=True)):
        wider = max(width, own)
        over_tokens = max_tokens is not None and (total + count) * wider > max_tokens
        over_sentences = max_sentences is not None and i - start >= max_sentences
        if i > start and (over_tokens or over_sentences):
            batches.append(range(start, i))
            start, total, wider = i, 0, own
        total += count
        width = wider
    if start < len(widths):
        batches.append(range(start, len(widths)))
    return batches


class BatchIterator:
    """Iterate over a `TranslationDataset` in token-budget batches (see the module docstring).

    `max_tokens` bounds each rank's padded batch, `B * max(S, T)`, EOS included. `rank` and
    `world_size` default to torch.distributed's when a process group is initialised, else 0/1.
    Iterating yields the rest of the current epoch, then moves to the next one.
    """

    def __init__(
        self,
        dataset: TranslationDataset,
        max_tokens: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        max_sentences: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        epoch: int = 0,
    ) -> None:
        self.dataset = dataset
        self.max_tokens = int(max_tokens)
        self.max_sentences = max_sentences
        self.seed = int(seed)
        self.shuffle = shuffle
        self.rank, self.world_size = _dist_defaults(rank, world_size)
        self.epoch = epoch
        self.position = 0
        self._lengths = np.maximum(dataset.src_lengths, dataset.tgt_lengths) + 1
        longest = int(self._lengths.max()) if len(self._lengths) else 0
        if self.max_tokens < longest:
            raise GmlmError(
                f"batching: max_tokens={self.max_tokens} cannot hold the longest pair of "
                f"{dataset!r} ({longest} tokens with EOS); raise max_tokens to at least {longest}"
            )
        if max_sentences is not None and max_sentences < 1:
            raise GmlmError(f"batching: max_sentences must be >= 1, got {max_sentences}")
        self._plan_epoch: int | None = None
        self._plan: list[tuple[np.ndarray, np.ndarray]] = []  # (this rank's share, global)

    # --- planning ---------------------------------------------------------------------------
    def plan(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches for `epoch`, as arrays of dataset rows."""
        return [share for share, _ in self._shares(epoch)]

    def _shares(self, epoch: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """This rank's batches for `epoch`, each with the global batch it is a share of
        (cached for one epoch)."""
        if self._plan_epoch != epoch:
            self._plan = [
                (share, batch)
                for batch in self._global_batches(epoch)
                if len(share := batch[self.rank :: self.world_size])
            ]
            self._plan_epoch = epoch
        return self._plan

    def _global_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        n = len(self._lengths)
        if self.shuffle:
            order = np.lexsort((rng.permutation(n), self._lengths))
        else:
            order = np.argsort(self._lengths, kind="stable")
        lengths = self._lengths[order]
        w = self.world_size
        cap = self.max_sentences if self.max_sentences is not None else self.max_tokens
        batches = []
        start = 0
        while start < n:
            # The largest end such that ceil(count / w) * lengths[end - 1] <= max_tokens:
            # monotone in end because lengths are sorted, so binary-search it.
            limit = min(n, start + w * min(cap, self.max_tokens // int(lengths[start])))
            ends = np.arange(start + 1, limit + 1)
            per_rank = -(-(ends - start) // w)
            ok = per_rank * lengths[ends - 1] <= self.max_tokens
            end = int(ends[np.searchsorted(~ok, True) - 1])
            batches.append(order[start:end])
            start = end
        if self.shuffle and batches and len(batches[-1]) < w:
            batches.pop()
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __len__(self) -> int:
        """Number of batches this rank gets in the current epoch."""
        return len(self._shares(self.epoch))

    # --- iteration ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        plan = self._shares(self.epoch)
        while self.position < len(plan):
            rows, whole = plan[self.position]
            self.position += 1
            yield self.collate(rows, whole)
        self.epoch += 1
        self.position = 0

    def collate(self, rows: np.ndarray, whole: np.ndarray) -> Batch:
        """The batch of dataset `rows`, a share of the global batch `whole`."""
        ds = self.dataset
        src_len = ds.src_lengths[rows]
        tgt_len = ds.tgt_lengths[rows]
        src = pad_rows(ds.src_data, ds.src_offsets[rows], src_len, ds.pad_id, ds.eos_id)
        tgt = pad_rows(ds.tgt_data, ds.tgt_offsets[rows], tgt_len, ds.pad_id, ds.eos_id)
        return Batch(
            src=torch.from_numpy(src),
            tgt=torch.from_numpy(tgt),
            src_lengths=torch.from_numpy(src_len + 1),
            tgt_lengths=torch.from_numpy(tgt_len + 1),
            indices=torch.from_numpy(np.asarray(rows, dtype=np.int64)),
            src_tokens=int(src_len.sum()) + len(rows),
            tgt_tokens=int(tgt_len.sum()) + len(rows),
            all_tgt_tokens=int(ds.tgt_lengths[whole].sum()) + len(whole),
            all_size=len(whole),
        )

    # --- resumption ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "max_tokens": self.max_tokens,
            "max_sentences": self.max_sentences,
            "world_size": self.world_size,
            "rank": self.rank,
            "dataset": self.dataset.fingerprint,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where `state` left off; the settings that shape the plan must match."""
        if state.get("version") != STATE_VERSION:
            raise GmlmError(f"batch iterator state version {state.get('version')} is unsupported")
        mine = self.state_dict()
        for key in ("seed", "shuffle", "max_tokens", "max_sentences", "world_size", "dataset"):
            if state.get(key) != mine[key]:
                raise GmlmError(
                    f"cannot resume the batch iterator: saved {key}={state.get(key)!r} but this "
                    f"run has {key}={mine[key]!r}; resume with the original settings"
                )
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        if self.position > len(self._shares(self.epoch)):
            raise GmlmError(f"batch iterator state position {self.position} is past the epoch end")
