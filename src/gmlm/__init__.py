"""gmlm: Generative Masked Language Models (PaDIR translation and the exact theory toolkit)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gmlm.provenance import VERSION

if TYPE_CHECKING:
    from gmlm.translation.translator import Translator

__version__ = VERSION


def load(
    checkpoint: str | Path,
    device: str = "auto",
    cuda_graphs: bool | None = None,
    fixed_shapes: bool | None = None,
) -> Translator:
    """A Translator for a trained checkpoint: ``gmlm.load(path).translate(["Hallo Welt."])``;
    `cuda_graphs`, `fixed_shapes`: GPU decoding, by CUDA graphs at bucketed shapes with no
    host sync inside PaDIR's passes or an AR step; None: on on a GPU (:class:`gmlm.Translator`).

    Imports torch and the models on first use, so ``import gmlm`` stays light.
    """
    from gmlm.translation.translator import load as load_translator

    return load_translator(checkpoint, device, cuda_graphs, fixed_shapes)


# The names `gmlm.NAME` gives besides load and __version__, and their modules: the decoding
# settings that `Translator.translate` takes (``translate(lines, SearchOptions(beam=5))``).
_HOMES = {
    "Translator": "gmlm.translation.translator",
    "SearchOptions": "gmlm.decoding.options",
    "RefinementOptions": "gmlm.decoding.options",
}
__all__ = ["load", "__version__", *_HOMES]


def __getattr__(name: str) -> Any:
    """``gmlm.Translator``, ``gmlm.SearchOptions``, ``gmlm.RefinementOptions``, imported on
    first use like :func:`load`."""
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'gmlm' has no attribute '{name}'")
