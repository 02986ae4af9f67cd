"""A trained model at an inference precision (``gmlm.decoding.options.PRECISIONS``).

* ``fp32``: the model as trained.
* ``bf16``: a copy with bfloat16 weights, so activations are bfloat16 too, rather than
  bfloat16 autocast over the fp32 model: the copy was the faster of the two for both systems
  (docs/DESIGN.md section 7). bf16 pays only where the CPU has bf16 instructions, or on a GPU.
* ``int8``: a copy whose Linear layers are dynamically quantised
  (``torch.ao.quantization.quantize_dynamic``: int8 weights, activations quantised on the fly,
  results in fp32), the output projection included: it is the largest matrix of the small
  models (8,000 x 256), left in fp32 a quarter of PaDIR's int8 time (docs/DESIGN.md section
  7). A tied embedding table gets an output layer of its own in the copy, so the table the
  inputs read stays fp32.
  Embeddings, LayerNorms and attention stay fp32. CPU only (PyTorch's int8 kernels).

Copies are made once per model and precision by the caller (see
:meth:`gmlm.translation.Translator.model_at`); the fp32 model is never changed.
"""

from __future__ import annotations

import copy
import warnings
from typing import TypeVar

import torch
from torch import nn

from gmlm.decoding.options import PRECISIONS, Precision
from gmlm.errors import GmlmError
from gmlm.nn.layers import TokenEmbeddings

Model = TypeVar("Model", bound=nn.Module)


def check_precision(precision: object) -> Precision:
    """`precision` if it is one of PRECISIONS, else a GmlmError listing them."""
    if precision not in PRECISIONS:
        raise GmlmError(f"precision={precision!r}: choose from {', '.join(PRECISIONS)}")
    return precision


def at_precision(model: Model, precision: Precision) -> Model:
    """`model` itself for fp32, else an eval-mode copy at `precision` (see the module
    docstring)."""
    check_precision(precision)
    if precision == "fp32":
        return model
    device = next(model.parameters()).device
    if precision == "int8" and device.type != "cpu":
        raise GmlmError(
            f"precision int8 (dynamic quantisation) runs on CPU only, but the model is on "
            f"{device}; use --device cpu, or --precision bf16 on a GPU"
        )
    # Ordinary tensors even when called under torch.inference_mode: inference tensors have no
    # version counter, which the stacked attention weights are keyed on.
    with torch.inference_mode(False):
        return _converted(model, precision)


def _converted(model: Model, precision: Precision) -> Model:
    converted = copy.deepcopy(model).eval()
    if precision == "bf16":
        return converted.to(torch.bfloat16)
    embeddings = converted.embeddings
    assert isinstance(embeddings, TokenEmbeddings)
    _untie_output(embeddings)
    linears = {
        name: torch.ao.quantization.default_dynamic_qconfig
        for name, module in converted.named_modules()
        if type(module) is nn.Linear
    }
    with warnings.catch_warnings():
        # torch.ao.quantization announces its move to torchao; it works in this torch.
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions")
        torch.ao.quantization.quantize_dynamic(
            converted, qconfig_spec=linears, dtype=torch.qint8, inplace=True
        )
    return converted


def _untie_output(embeddings: TokenEmbeddings) -> None:
    """Give a tied table an output layer of its own (a copy of the table), so that quantising
    the output projection leaves the table the inputs read in fp32."""
    if embeddings.output is None:
        vocab, dim = embeddings.source.weight.shape
        output = nn.Linear(dim, vocab, bias=False)
        output.weight = nn.Parameter(embeddings.source.weight.detach().clone())
        embeddings.output = output
