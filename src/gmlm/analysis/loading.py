"""What every analysis of a PaDIR checkpoint starts with: checked sizes and the model, and
where it runs, as the results record it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gmlm import provenance
from gmlm.config import BATCH_SIZE, SENTENCES
from gmlm.errors import GmlmError
from gmlm.models import PadirModel
from gmlm.translation.translator import Translator, load


def load_padir(
    checkpoint: str | Path, device: str, sentences: int | None, batch_size: int, studies: str
) -> tuple[Translator, PadirModel]:
    """The translator of a PaDIR `checkpoint` and its model, after checking the sizes; an
    autoregressive checkpoint is an error that says what the analysis (`studies`) needs."""
    if sentences is not None:
        SENTENCES.check(sentences, "sentences")
    BATCH_SIZE.check(batch_size, "batch_size")
    translator = load(checkpoint, device)
    if translator.kind != "padir" or not isinstance(translator.model, PadirModel):
        raise GmlmError(
            f"{checkpoint}: an autoregressive checkpoint (kind '{translator.kind}'); the "
            f"analysis studies {studies}, give a PaDIR checkpoint (kind 'padir')"
        )
    return translator, translator.model


def padir_at(translator: Translator, bf16: bool) -> PadirModel:
    """The translator's PaDIR model, or its copy with bf16 weights and activations."""
    model = translator.model_at("bf16" if bf16 else "fp32")
    assert isinstance(model, PadirModel)
    return model


def run_provenance(translator: Translator) -> dict[str, Any]:
    """The settings fields every analysis result records about where it ran: the device, the
    torch threads and the torch and gmlm versions."""
    return {
        "device": str(translator.device),
        "threads": provenance.torch_threads(),
        "torch": provenance.torch_version(),
        "gmlm": provenance.gmlm_version(),
    }
