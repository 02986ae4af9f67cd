"""Settings of the quick `gmlm reproduce` runs the reproduction tests make."""

from __future__ import annotations

QUICK_THEORY = [
    "theory.verify_max_n=3",
    "theory.repetitions=2",
    "theory.sample_sizes=[100,200]",
    "theory.figure3_couplings=[1.0]",
    "theory.figure3_ks=[1,10]",
    "theory.figure3_budget=50",
]


def synthetic_data(corpus: str) -> list[str]:
    """The data stage on the synthetic `corpus` (a files: spec), small, on one thread."""
    return [
        f"data.corpus={corpus}",
        "data.vocab_size=400",
        "data.overrides=[valid_fraction=0.05,test_fraction=0.05]",
        "threads=1",
    ]


def quick(corpus: str, *extra: str) -> list[str]:
    """The smoke preset made faster still: a few training steps, small evaluation grids."""
    return [
        *synthetic_data(corpus),
        *QUICK_THEORY,
        "teacher.overrides=[max_steps=40,valid_every=20,valid_sentences=5]",
        "ar.overrides=[max_steps=20,valid_every=20,valid_sentences=0]",
        "padir.overrides=[max_steps=20,valid_every=20,valid_sentences=0]",
        "evaluate.padir_steps=[1,4]",
        "bench.sentences=3",
        "bench.warmup=1",
        "bench.threads=1",  # 2 threads on a busy 2-core machine take tens of seconds
        "bench.batch_sizes=[1,2]",
        "attention.sentences=20",
        *extra,
    ]


# The length calibration switched on, small grids on a few validation sentences; no margin, so
# that any gain is kept and reaches the later stages.
CALIBRATE = [
    "calibrate.enabled=true",
    "calibrate.sentences=8",
    "calibrate.length_shifts=[0,1]",
    "calibrate.length_penalties=[0.6,1.5]",
    "calibrate.min_gain=0",
]
