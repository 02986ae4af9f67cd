"""German-looking sentences over a 10-word vocabulary, for tokenizers and translation tests."""

from __future__ import annotations

import random

WORDS = ["der", "die", "das", "Hund", "Katze", "läuft", "springt", "über", "einen", "großen"]


def sentences(count: int, seed: int = 0) -> list[str]:
    """`count` sentences of 2 to 9 random WORDS and a full stop, reproducible from `seed`."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) + "." for _ in range(count)
    ]
