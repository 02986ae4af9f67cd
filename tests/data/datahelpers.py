"""Helpers for the data tests: synthetic corpora and small, fast settings."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

from gmlm.data.prepare import DataConfig, FilterConfig, TokenizerConfig

MULTI30K = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "multi30k"

SRC_WORDS = [
    "der",
    "die",
    "das",
    "Hund",
    "Katze",
    "läuft",
    "springt",
    "über",
    "einen",
    "großen",
    "kleinen",
    "Baum",
    "Straße",
    "schnell",
]
TGT_WORDS = [
    "the",
    "the",
    "the",
    "dog",
    "cat",
    "runs",
    "jumps",
    "over",
    "a",
    "big",
    "small",
    "tree",
    "street",
    "quickly",
]


def make_pairs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """Synthetic parallel sentences: word-for-word 'translations' of random word strings."""
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        idx = [rng.randrange(len(SRC_WORDS)) for _ in range(rng.randint(3, 12))]
        src.append(" ".join(SRC_WORDS[i] for i in idx) + ".")
        tgt.append(" ".join(TGT_WORDS[i] for i in idx).capitalize() + ".")
    return src, tgt


def write_lines(path: Path, lines: list[str]) -> Path:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def tiny_config(corpus: str, **changes: object) -> DataConfig:
    """Small vocabulary and one thread: trains in well under a second."""
    cfg = DataConfig(
        corpus=corpus,
        threads=1,
        tokenizer=TokenizerConfig(vocab_size=400),
        filter=FilterConfig(max_len=64, max_ratio=3.0),
        valid_fraction=0.1,
        test_fraction=0.1,
    )
    for key, value in changes.items():
        setattr(cfg, key, value)
    return cfg
