"""The settings of `gmlm bench`, each declared once: its flag, help and default come from the
field (:mod:`gmlm.cli.options`), the reproduce pipeline's bench stage is this class plus its
switch (:class:`gmlm.reproduce.config.BenchStage`), and the report's command line is rendered
from it (:func:`gmlm.settings.to_argv`).

Torch-free, so that `gmlm bench --help` stays light. What is timed and how:
:mod:`gmlm.bench.latency`.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field

from gmlm.config import (
    BATCH_SIZE,
    MAX_TOKENS,
    SENTENCES,
    THREAD_COUNT,
    WARMUP,
    check_settings,
    check_value,
)
from gmlm.decoding.options import (
    LENGTH_BEAM_SWEEP,
    PRECISIONS,
    STEPS_SWEEP,
    Precision,
    RefinementOptions,
)
from gmlm.errors import GmlmError
from gmlm.settings import doc

# The PaDIR settings the bench sweeps, one system per value (BenchSettings.padir_steps and
# length_beams); every other RefinementOptions field is one setting of every PaDIR system.
SWEPT = ("steps", "length_beam")


def _swept(name: str) -> dict[str, object]:
    """The metadata of a list of values of the RefinementOptions field `name`, one PaDIR
    system each: that field's help and range."""
    (swept,) = (f for f in dataclasses.fields(RefinementOptions) if f.name == name)
    return doc(
        f"one PaDIR system per value (comma-separated) of {name}: {swept.metadata['help']}",
        flag="--steps" if name == "steps" else None,
        range=swept.metadata["range"],
    )


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """What `gmlm bench` times and how (each field's help says what)."""

    split: str = field(default="test", metadata=doc("split whose sources are timed"))
    sentences: int = field(
        default=100,
        metadata=doc(
            "first N usable sentences of the split (time grows linearly with it)", range=SENTENCES
        ),
    )
    warmup: int = field(
        default=5,
        metadata=doc(
            "untimed sentences per system and precision first (on a GPU every timed sentence, "
            "so that each shape is met before timing)",
            range=WARMUP,
        ),
    )
    threads: int = field(default=2, metadata=doc("torch threads", range=THREAD_COUNT))
    precisions: tuple[Precision, ...] = field(
        default=PRECISIONS,
        metadata=doc(
            "precisions timed, comma-separated: fp32, bf16 (weights and activations), int8 "
            "(dynamic quantisation of the Linear layers, CPU only)",
            flag="--precision",
        ),
    )
    batch_sizes: tuple[int, ...] = field(
        default=(1, 8, 64),
        metadata=doc("throughput batch sizes (1 reuses the latency pass)", range=BATCH_SIZE),
    )
    max_tokens: int | None = field(
        default=None,
        metadata=doc(
            "throughput rows: padded decoder row-positions per decoder batch at most, within "
            "each batch of --batch-sizes sentences, as gmlm translate's --max-tokens bounds "
            "them (none: each such batch is one decoder batch); not with --ctranslate2, whose "
            "workers decode each batch whole",
            range=MAX_TOKENS,
        ),
    )
    padir_steps: tuple[int, ...] = field(default=STEPS_SWEEP, metadata=_swept("steps"))
    length_beams: tuple[int, ...] = field(default=LENGTH_BEAM_SWEEP, metadata=_swept("length_beam"))
    ctranslate2: bool = field(
        default=False,
        metadata=doc(
            "also time --ar (and --ar1) converted to CTranslate2, greedy and beam 5 (CPU; in "
            "the precisions fp32 and int8 of --precision), in a worker process of its own per "
            "precision with the same threads (needs: pip install 'gmlm[ctranslate2]')"
        ),
    )

    def validate(self) -> None:
        """Every field of the type it declares and within its range; a GmlmError naming it."""
        hints = typing.get_type_hints(type(self))
        for name in ("precisions", "batch_sizes", "padir_steps", "length_beams"):
            if not getattr(self, name):
                raise GmlmError(f"{name}: give at least one")
        check_value(tuple(self.precisions), hints["precisions"], "precisions")
        check_value(self.max_tokens, hints["max_tokens"], "max_tokens")
        check_settings(self)
        if self.max_tokens is not None and self.ctranslate2:
            raise GmlmError(
                f"max_tokens={self.max_tokens} with ctranslate2: the CTranslate2 workers decode "
                "each batch of --batch-sizes whole, so their rows would not compare; leave out "
                "--max-tokens or --ctranslate2"
            )
