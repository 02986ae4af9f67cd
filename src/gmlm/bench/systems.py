"""The systems `gmlm bench` times: PaDIR with each swept T and B, each AR checkpoint greedy
and with beam 5 (:func:`make_systems`), and the same AR weights run by CTranslate2
(:func:`ctranslate2_systems`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gmlm.decoding.options import KIND_NAMES, DecodingOptions, RefinementOptions, pruning_text
from gmlm.errors import GmlmError
from gmlm.export.ctranslate2_worker import Ct2Worker
from gmlm.translation.translator import Translator, load

AR_BEAMS = (1, 5)
# The optional AR models come after --ar, in this order, in the systems and tables.
AR_ROLES = ("ar", "teacher", "ar1")


@dataclass(frozen=True)
class System:
    """One decoding setting of one checkpoint: `name` (e.g. "padir T=4 B=5"), `model` (the
    role: "padir", "ar", "teacher" or "ar1") and its decoding options; `worker`: run by
    CTranslate2 in that worker process instead of by `translator` (the same weights)."""

    name: str
    model: str
    translator: Translator
    options: DecodingOptions
    worker: Ct2Worker | None = None

    @property
    def kind(self) -> str:
        return self.translator.kind

    def settings(self) -> dict[str, Any]:
        """The decoding settings `Translator.translate` takes, as keyword arguments."""
        if isinstance(self.options, RefinementOptions):
            return {"steps": self.options.steps, "length_beam": self.options.length_beam}
        return {"beam": self.options.beam}


def load_role(
    path: str | Path,
    role: str,
    kind: str,
    device: str,
    clock: Callable[[], float] = time.perf_counter,
    cuda_graphs: bool = False,
) -> tuple[Translator, float]:
    """The checkpoint `path` given for `role` (its flag: --role), loaded, and the seconds that
    took; a checkpoint of another kind than `kind` is an error naming the flag."""
    flag = f"--{role}"
    start = clock()
    translator = load(path, device=device, cuda_graphs=cuda_graphs)
    seconds = clock() - start
    if translator.kind != kind:
        expected = KIND_NAMES[kind]
        raise GmlmError(
            f"{flag} {path}: is a checkpoint of kind '{translator.kind}', but {flag} needs "
            f"{expected} checkpoint (kind '{kind}')"
        )
    return translator, seconds


def make_systems(
    translators: dict[str, Translator],
    steps: Sequence[int],
    length_beams: Sequence[int],
    padir_options: Mapping[str, Any] = MappingProxyType({}),
) -> list[System]:
    """PaDIR T x B settings (each with `padir_options`), then greedy and beam 5 of each AR
    model present."""
    systems = []
    padir = translators["padir"]
    for t in steps:
        for b in length_beams:
            options = padir.options(steps=t, length_beam=b, **padir_options)
            systems.append(System(f"padir T={t} B={b}", "padir", padir, options))
    for role in AR_ROLES:
        if role in translators:
            for beam in AR_BEAMS:
                label = "greedy" if beam == 1 else f"beam{beam}"
                options = translators[role].options(beam=beam)
                systems.append(System(f"{role} {label}", role, translators[role], options))
    return systems


def padir_note(options: DecodingOptions) -> str:
    """PaDIR's decoding settings that the system names (T, B) leave out, in words."""
    assert isinstance(options, RefinementOptions)
    return (
        f"pruning {pruning_text(options.prune_after, options.prune_keep)}; length shift "
        f"{options.length_shift}; selection {options.selection}; stutter remasking "
        f"{options.stutter_remask} (repeats of up to {options.stutter_ngram} tokens)"
    )


def ctranslate2_systems(role: str, translator: Translator, worker: Ct2Worker) -> list[System]:
    """Greedy and beam 5 of the AR model `translator` (role "ar" or "ar1"), run by
    CTranslate2 in `worker` (at the worker's precision only)."""
    return [
        System(
            f"{role} ct2 {'greedy' if beam == 1 else f'beam{beam}'}",
            role,
            translator,
            translator.options(beam=beam),
            worker,
        )
        for beam in AR_BEAMS
    ]
