"""Helpers for the data tests: synthetic corpora and small, fast settings."""

from __future__ import annotations

import gzip
import itertools
import os
import random
from pathlib import Path

from gmlm.data.prepare import DataConfig, FilterConfig, TokenizerConfig

# The Multi30k folder (raw .gz files) of the tests that need the real data set, skipped where
# it is absent: $MULTI30K (the variable of `make demo` and `make verify-results`), or else the
# shared data folder beside the repository.
MULTI30K = Path(
    os.environ.get("MULTI30K")
    or Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "multi30k"
)

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


def make_pairs(
    n: int, seed: int = 0, words: tuple[int, int] = (3, 12)
) -> tuple[list[str], list[str]]:
    """Synthetic parallel sentences: word-for-word 'translations' of random word strings of
    `words[0]` to `words[1]` words."""
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        idx = [rng.randrange(len(SRC_WORDS)) for _ in range(rng.randint(*words))]
        src.append(" ".join(SRC_WORDS[i] for i in idx) + ".")
        tgt.append(" ".join(TGT_WORDS[i] for i in idx).capitalize() + ".")
    return src, tgt


def without_adjacent_repeats(src: list[str], tgt: list[str]) -> tuple[list[str], list[str]]:
    """The pairs whose target has no word twice in a row ("the the"): PaDIR's post-processing
    drops adjacent repeats (the paper's stutter removal) and would be penalised on them."""
    keep = [
        i
        for i, t in enumerate(tgt)
        if all(a != b for a, b in itertools.pairwise(t.lower().rstrip(".").split()))
    ]
    return [src[i] for i in keep], [tgt[i] for i in keep]


def write_lines(path: Path, lines: list[str]) -> Path:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def write_corpus(root: Path, src: list[str], tgt: list[str]) -> str:
    """`src` and `tgt` written as root/c.de and root/c.en; their `files:` corpus spec."""
    write_lines(root / "c.de", src)
    write_lines(root / "c.en", tgt)
    return f"files:{root / 'c.de'},{root / 'c.en'}"


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
