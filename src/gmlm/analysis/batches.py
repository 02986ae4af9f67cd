"""The decode loop of the analyses that run the PaDIR model themselves (`gmlm.analysis.attention`,
`gmlm.analysis.length`): a split's sources in batches, as ``gmlm translate`` batches them.

Sources are taken longest first (a stable sort, as :meth:`Translator.translate_ids` orders
them), `batch_size` at a time; PaDIR's initial tokens are keyed by the seed and each
sentence's own ids (:mod:`gmlm.decoding.draws`), so an analysis decodes every sentence as
``gmlm translate`` of the split's source file does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from torch import Tensor
from tqdm import tqdm

from gmlm.translation.translator import Translator


@dataclass(frozen=True)
class SourceBatch:
    """One batch: `rows`, the positions of its sources in the sequence given to
    :func:`source_batches`; `lines`, their lines in the split; `src` (B, S), their ids + EOS,
    right-padded, on the model's device."""

    rows: list[int]
    lines: list[int]
    src: Tensor
    seed: int


def source_batches(
    translator: Translator,
    sources: Sequence[Sequence[int]],
    lines: Sequence[int],
    *,
    batch_size: int,
    seed: int,
    desc: str,
    progress: bool,
) -> Iterator[SourceBatch]:
    """`sources` (ids without EOS; `lines`: each one's line in the split) in batches of
    `batch_size`, longest first, with a progress bar of sentences (`desc`) if `progress`."""
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    with tqdm(total=len(order), desc=desc, unit="sent", disable=None if progress else True) as bar:
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            src = translator.source_tensor([sources[i] for i in rows])
            yield SourceBatch(rows, [lines[i] for i in rows], src, seed)
            bar.update(len(rows))
