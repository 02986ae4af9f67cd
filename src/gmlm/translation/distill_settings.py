"""The settings of `gmlm distill` (:func:`gmlm.translation.distill.distill`), each declared
once: its flag, help and default come from the field (:mod:`gmlm.cli.options`), the reproduce
pipeline's distill stage is this class plus its switch and batch size
(:class:`gmlm.reproduce.config.DistillStage`), and the report's command line is rendered from
it (:func:`gmlm.settings.to_argv`). What bounds a decoder batch is the shared --max-tokens and
--batch-size of every translation (:func:`gmlm.cli.flags.add_batching`).

Torch-free, so that `gmlm distill --help` stays light.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field
from typing import Literal

from gmlm.config import SENTENCES, THREADS, check_settings, check_value, field_range
from gmlm.decoding.options import PAPER_BEAM, SearchOptions
from gmlm.settings import doc

# About 20 s of a small teacher's work (beam 5, bf16, one core): little to redo after a crash.
CHUNK_SENTENCES = 1000

# The teacher's arithmetic: fp32, bf16 weights and activations, or auto (bf16 on GPUs with
# bf16, fp32 on every CPU: gmlm.distributed.bf16_by_default).
DistillPrecision = Literal["auto", "fp32", "bf16"]


@dataclasses.dataclass(frozen=True)
class DistillSettings:
    """How `gmlm distill` translates the training sources (each field's help says what)."""

    beam: int = field(
        default=PAPER_BEAM,
        metadata=doc("teacher beam size", range=field_range(SearchOptions, "beam")),
    )
    precision: DistillPrecision = field(
        default="auto",
        metadata=doc(
            "fp32, or bf16 weights and activations; auto: bf16 on GPUs with bf16, fp32 on "
            "every CPU, so that every CPU model distills the same data"
        ),
    )
    threads: int = field(
        default=0,
        metadata=doc(
            "torch CPU threads, 0: torch's choice (all cores, unless the process set "
            "another). Use 1 when another job shares the cores: 2 threads competing with a "
            "2-thread training job on 2 cores were measured 10x slower than 1 thread",
            range=THREADS,
        ),
    )
    chunk_sentences: int = field(
        default=CHUNK_SENTENCES,
        metadata=doc(
            "sentences per saved chunk, the unit of resuming and, under torchrun, of sharing "
            "the work between processes (e.g. torchrun --nproc_per_node 4 -m gmlm distill "
            "...; the result is the same as one process's)",
            range=SENTENCES,
        ),
    )

    def validate(self) -> None:
        """Every field of the type it declares and within its range; a ConfigError naming it."""
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(DistillSettings):
            check_value(getattr(self, f.name), hints[f.name], f.name)
        check_settings(self)


DEFAULT_SETTINGS = DistillSettings()
