"""Dataset statistics (`stats.json`) and their human-readable table (`gmlm data stats`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gmlm.data.cleaning import DROP_REASONS
from gmlm.records import Record

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


@dataclass(frozen=True)
class LengthSummary:
    """Mean, percentiles (`PERCENTILES`) and max of token lengths (EOS not included)."""

    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    max: float


@dataclass(frozen=True)
class UnkTokens:
    """[UNK] tokens in the kept pairs, per side."""

    src: int
    tgt: int


@dataclass(frozen=True)
class SplitStats:
    """One split: pairs read, kept, dropped by reason (`DROP_REASONS`), the kept pairs'
    tokens, [UNK] tokens and lengths."""

    pairs: int
    kept: int
    dropped: dict[str, int]
    src_tokens: int
    tgt_tokens: int
    unk_tokens: UnkTokens
    src_length: LengthSummary
    tgt_length: LengthSummary


@dataclass(frozen=True)
class TokenizerStats:
    """The tokenizer: vocabulary size, SentencePiece model type ("reused" for a tokenizer
    taken from another dataset) and fingerprint."""

    vocab_size: int
    model_type: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class DatasetStats(Record):
    """`stats.json` of a prepared dataset: the corpus, its languages, the length limit (EOS
    included), the tokenizer, each split, notes on how it was made, and the seconds of each
    step of the preparation."""

    corpus: str
    src_lang: str | None
    tgt_lang: str | None
    max_len: int
    tokenizer: TokenizerStats
    splits: dict[str, SplitStats]
    notes: tuple[str, ...]
    seconds: dict[str, float]


def length_summary(lengths: np.ndarray) -> LengthSummary:
    """Mean, percentiles and max of token lengths (EOS not included)."""
    if len(lengths) == 0:
        return LengthSummary(mean=0.0, **{f"p{p}": 0.0 for p in PERCENTILES}, max=0.0)
    values = np.asarray(lengths, dtype=np.float64)
    percentiles = np.percentile(values, PERCENTILES)
    return LengthSummary(
        mean=round(float(values.mean()), 2),
        **{f"p{p}": round(float(v), 1) for p, v in zip(PERCENTILES, percentiles, strict=True)},
        max=float(values.max()),
    )


def split_stats(
    *,
    pairs: int,
    dropped: Mapping[str, int],
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    src_unk: int,
    tgt_unk: int,
) -> SplitStats:
    """The stats.json entry of one split, from the lengths of its kept pairs."""
    return SplitStats(
        pairs=pairs,
        kept=len(src_lengths),
        dropped={reason: int(dropped.get(reason, 0)) for reason in DROP_REASONS},
        src_tokens=int(np.sum(src_lengths)),
        tgt_tokens=int(np.sum(tgt_lengths)),
        unk_tokens=UnkTokens(src=src_unk, tgt=tgt_unk),
        src_length=length_summary(src_lengths),
        tgt_length=length_summary(tgt_lengths),
    )


def format_stats(stats: DatasetStats) -> str:
    """A table of pairs kept/dropped and token lengths per split, for people."""
    lines = [
        f"corpus: {stats.corpus}  ({stats.src_lang or 'src'} -> {stats.tgt_lang or 'tgt'})",
        f"tokenizer: sentencepiece {stats.tokenizer.model_type}, "
        f"vocab {stats.tokenizer.vocab_size}, max_len {stats.max_len} (with EOS)",
    ]
    header = f"{'split':<6} {'pairs':>8} {'kept':>8} " + " ".join(f"{r:>12}" for r in DROP_REASONS)
    header += (
        f" {'src tok':>10} {'tgt tok':>10}  {'src len p50/p99/max':>20} {'tgt len p50/p99/max':>20}"
    )
    lines += ["", header]
    for split, s in stats.splits.items():
        row = f"{split:<6} {s.pairs:>8,} {s.kept:>8,} " + " ".join(
            f"{s.dropped[r]:>12,}" for r in DROP_REASONS
        )
        row += f" {s.src_tokens:>10,} {s.tgt_tokens:>10,}  "
        row += " ".join(f"{_lens(summary):>20}" for summary in (s.src_length, s.tgt_length))
        lines.append(row)
    if stats.seconds:
        lines += ["", "time (s): " + ", ".join(f"{k} {v:.2f}" for k, v in stats.seconds.items())]
    lines += [f"note: {n}" for n in stats.notes]
    return "\n".join(lines)


def _lens(summary: LengthSummary) -> str:
    return f"{summary.p50:g}/{summary.p99:g}/{summary.max:g}"
