"""Dataset statistics (`stats.json`) and their human-readable table (`gmlm data stats`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gmlm.data.cleaning import DROP_REASONS

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


def length_summary(lengths: np.ndarray) -> dict[str, float]:
    """Mean, percentiles and max of token lengths (EOS not included)."""
    if len(lengths) == 0:
        return {"mean": 0.0, **{f"p{p}": 0.0 for p in PERCENTILES}, "max": 0.0}
    values = np.asarray(lengths, dtype=np.float64)
    out = {"mean": round(float(values.mean()), 2)}
    for p, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        out[f"p{p}"] = round(float(v), 1)
    out["max"] = float(values.max())
    return out


def split_stats(
    *,
    pairs: int,
    dropped: Mapping[str, int],
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    src_unk: int,
    tgt_unk: int,
) -> dict[str, Any]:
    """The stats.json entry of one split, from the lengths of its kept pairs."""
    return {
        "pairs": pairs,
        "kept": len(src_lengths),
        "dropped": {reason: int(dropped.get(reason, 0)) for reason in DROP_REASONS},
        "src_tokens": int(np.sum(src_lengths)),
        "tgt_tokens": int(np.sum(tgt_lengths)),
        "unk_tokens": {"src": src_unk, "tgt": tgt_unk},
        "src_length": length_summary(src_lengths),
        "tgt_length": length_summary(tgt_lengths),
    }


def format_stats(stats: Mapping[str, Any]) -> str:
    """A table of pairs kept/dropped and token lengths per split, for people."""
    lines = [
        f"corpus: {stats.get('corpus')}  ({stats.get('src_lang') or 'src'} -> "
        f"{stats.get('tgt_lang') or 'tgt'})",
        f"tokenizer: sentencepiece {stats.get('tokenizer', {}).get('model_type', '?')}, "
        f"vocab {stats.get('tokenizer', {}).get('vocab_size', '?')}, "
        f"max_len {stats.get('max_len')} (with EOS)",
    ]
    header = f"{'split':<6} {'pairs':>8} {'kept':>8} " + " ".join(f"{r:>12}" for r in DROP_REASONS)
    header += (
        f" {'src tok':>10} {'tgt tok':>10}  {'src len p50/p99/max':>20} {'tgt len p50/p99/max':>20}"
    )
    lines += ["", header]
    for split, s in stats.get("splits", {}).items():
        row = f"{split:<6} {s['pairs']:>8,} {s['kept']:>8,} " + " ".join(
            f"{s['dropped'][r]:>12,}" for r in DROP_REASONS
        )
        row += f" {s['src_tokens']:>10,} {s['tgt_tokens']:>10,}  "
        row += " ".join(f"{_lens(s[k]):>20}" for k in ("src_length", "tgt_length"))
        lines.append(row)
    notes = [str(n) for n in stats.get("notes", [])]
    seconds = stats.get("seconds")
    if seconds:
        lines += ["", "time (s): " + ", ".join(f"{k} {v:.2f}" for k, v in seconds.items())]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def _lens(summary: Mapping[str, float]) -> str:
    return f"{summary['p50']:g}/{summary['p99']:g}/{summary['max']:g}"
