"""How a translation cuts its sources into batches (the module docstring of
:mod:`gmlm.translation.translator`, "Batches", says the rules): by a budget of padded decoder
row-positions and/or a count of sentences, widest first; for PaDIR under a token budget, by
the widths of the candidates its length pass predicts, the encoding kept for the batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from gmlm.config import BATCH_SIZE, MAX_TOKENS, check_value
from gmlm.data.batching import cut_batches
from gmlm.decoding.options import (
    MAX_TOKENS_DEFAULT,
    DecodingOptions,
    RefinementOptions,
    rows_per_sentence,
)
from gmlm.decoding.refinement import candidate_lengths
from gmlm.models import AutoregressiveModel, PadirModel
from gmlm.models.padir import PadirEncoderOutput
from gmlm.nn.config import ModelConfig

# Bytes of encoder states PaDIR's length pass keeps at once under a token budget: a window
# of this many bytes' worth of sentences (fp32 states, padded) is encoded, sorted by its
# predicted lengths and decoded before the next (see plan_batches).
PLAN_BYTES = 64 << 20


class Planned(NamedTuple):
    """What PaDIR's length pass found for a batch: the lengths to decode (B, length_beam),
    and the encoding of its sources."""

    lengths: Tensor
    encoded: PadirEncoderOutput


def batch_limits(batch_size: int | None, max_tokens: int | None) -> tuple[int | None, int | None]:
    """(batch_size, max_tokens), each checked; neither given: (None, MAX_TOKENS_DEFAULT)."""
    for name, value, limits in (
        ("batch_size", batch_size, BATCH_SIZE),
        ("max_tokens", max_tokens, MAX_TOKENS),
    ):
        if value is not None:
            check_value(value, int, name)
            limits.check(value, name)
    if batch_size is None and max_tokens is None:
        return None, MAX_TOKENS_DEFAULT
    return batch_size, max_tokens


def source_tensor(
    config: ModelConfig, rows: Sequence[Sequence[int]], device: torch.device
) -> Tensor:
    """(B, S) ids + EOS, right-padded, on `device`: the encoder input of source ids (no EOS)."""
    width = max(len(r) for r in rows) + 1
    src = torch.full((len(rows), width), config.pad_id, dtype=torch.long)
    for i, ids in enumerate(rows):
        src[i, : len(ids) + 1] = torch.tensor([*ids, config.eos_id])
    return src.to(device)


def plan_batches(
    model: AutoregressiveModel | PadirModel,
    config: ModelConfig,
    sources: Sequence[Sequence[int]],
    options: DecodingOptions,
    batch_size: int | None,
    max_tokens: int | None,
    device: torch.device,
) -> Iterator[tuple[list[int], Planned | None]]:
    """The batches (indices of `sources`) in decoding order, widest first, each with what
    PaDIR's length pass found for it under a token budget (else None); `device`: the
    model's."""
    rows = rows_per_sentence(options)
    by_source = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    if not isinstance(options, RefinementOptions) or max_tokens is None:
        widths = [len(sources[i]) + 1 for i in by_source]
        for cut in cut_batches(widths, [rows] * len(widths), max_tokens, batch_size):
            yield [by_source[j] for j in cut], None
        return
    assert isinstance(model, PadirModel)
    # Windows of sentences of similar source length, each with its encoder states kept
    # for its batches (so the encoder runs once per sentence) within PLAN_BYTES.
    budget = max(1, PLAN_BYTES // (4 * config.d_model))
    start = 0
    while start < len(by_source):
        end = start + max(1, budget // (len(sources[by_source[start]]) + 1))
        window = by_source[start:end]
        start = end
        texts = [sources[i] for i in window]
        encoded, lengths = length_pass(model, config, texts, options, max_tokens, device)
        candidates = candidate_lengths(lengths, options, config)
        widths = candidates.max(1).values.tolist()
        local = sorted(range(len(window)), key=lambda j: -widths[j])  # stable: by source
        for cut in cut_batches(
            [widths[j] for j in local], [rows] * len(local), max_tokens, batch_size
        ):
            picked = [local[k] for k in cut]
            index = torch.tensor(picked, device=encoded.memory.device)
            width = max(len(sources[window[j]]) for j in picked) + 1
            mine = encoded.select(index)
            mine = PadirEncoderOutput(
                mine.memory[:, :width], mine.padding_mask[:, :width], mine.length_state
            )
            yield [window[j] for j in picked], Planned(lengths[picked], mine)


def length_pass(
    model: PadirModel,
    config: ModelConfig,
    sources: Sequence[Sequence[int]],
    options: RefinementOptions,
    max_tokens: int,
    device: torch.device,
) -> tuple[PadirEncoderOutput, Tensor]:
    """The encoding of `sources` (longest first), padded to the first's length, and the
    (N, length_beam) lengths PaDIR decodes for them, on the CPU (its length head's top
    length_beam plus length_shift); encoded in batches of at most `max_tokens` padded source
    tokens."""
    widths = [len(ids) + 1 for ids in sources]
    lengths = torch.zeros(len(sources), options.length_beam, dtype=torch.long)
    parts = []
    for cut in cut_batches(widths, [1] * len(widths), max_tokens, None):
        src = source_tensor(config, sources[cut.start : cut.stop], device)
        encoded = model.encode(src)
        top = model.predict_lengths(encoded, options.length_beam) + options.length_shift
        lengths[cut.start : cut.stop] = top.cpu()
        pad = widths[0] - src.shape[1]
        parts.append(
            (
                torch.nn.functional.pad(encoded.memory, (0, 0, 0, pad)),
                torch.nn.functional.pad(encoded.padding_mask, (0, pad), value=True),
                encoded.length_state,
            )
        )
    # copies (torch.cat), as they must be: a graphed encoder reuses its output buffers
    memory, mask, state = (torch.cat(tensors) for tensors in zip(*parts, strict=True))
    return PadirEncoderOutput(memory, mask, state), lengths
