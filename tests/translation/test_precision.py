"""Inference precisions (gmlm.translation.precision): every precision decodes, the bf16 and
int8 copies of a trained model mostly agree with fp32, the fp32 model is never changed, and
a wrong precision is an error."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding import RefinementOptions, SearchOptions, beam_search, refine
from gmlm.decoding.options import PRECISIONS
from gmlm.errors import GmlmError
from gmlm.models import AutoregressiveModel, PadirModel, build_model
from gmlm.nn import ModelConfig
from gmlm.translation.precision import at_precision
from gmlm.translation.translator import Translator
from tests.helpers.sentences import sentences

QUANTIZED = torch.ao.nn.quantized.dynamic.Linear


def linear_types(model: nn.Module) -> dict[str, type]:
    """Module name -> type of every float or dynamically quantised Linear layer."""
    return {
        name: type(module)
        for name, module in model.named_modules()
        if type(module) in (nn.Linear, QUANTIZED)
    }


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_every_precision_decodes_and_the_fp32_model_stays(
    kind: str, tokenizer: Tokenizer, text_config: ModelConfig
) -> None:
    torch.manual_seed(0)
    model = build_model(kind, text_config)
    translator = Translator(kind, model, tokenizer)  # type: ignore[arg-type]
    before = {name: p.clone() for name, p in model.state_dict().items()}
    lines = sentences(3, seed=1)
    settings = {"max_len_b": 4} if kind == "ar" else {"steps": 2, "length_beam": 2}
    fp32 = translator.translate(lines, **settings)
    for precision in PRECISIONS:
        out = translator.translate(lines, precision=precision, **settings)
        assert len(out) == 3 and all(out), precision
        assert translator.model_at(precision) is translator.model_at(precision)  # made once
    assert translator.translate(lines, **settings) == fp32
    assert translator.model_at("fp32") is model
    after = model.state_dict()
    assert all(torch.equal(after[name], value) for name, value in before.items())
    assert {p.dtype for p in model.parameters()} == {torch.float32}

    bf16 = translator.model_at("bf16")
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    # int8: every Linear is quantised, the (untied) output projection included; embeddings stay.
    int8 = linear_types(translator.model_at("int8"))
    assert int8.keys() == linear_types(model).keys() and "embeddings.output" in int8
    assert set(int8.values()) == {QUANTIZED}
    assert translator.model_at("int8").embeddings.source.weight.dtype == torch.float32


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_int8_quantises_a_tied_output_projection_apart_from_the_table(
    kind: str, text_config: ModelConfig
) -> None:
    torch.manual_seed(0)
    model = build_model(kind, dataclasses.replace(text_config, tie_embeddings=True))
    table = model.embeddings.source.weight.detach().clone()
    int8 = at_precision(model, "int8")
    assert model.embeddings.output is None  # the fp32 model stays tied
    assert type(int8.embeddings.output) is QUANTIZED
    # The embedding table the inputs read stays fp32 and equal to the trained one.
    assert int8.embeddings.source.weight.dtype == torch.float32
    assert torch.equal(int8.embeddings.source.weight, table)
    hidden = torch.randn(2, 3, text_config.d_model)
    with torch.inference_mode():
        exact = model.embeddings.logits(hidden)
        approx = int8.embeddings.logits(hidden)
    # int8 weights and activations: close to the fp32 logits, not equal to them.
    assert approx.shape == exact.shape and not torch.equal(approx, exact)
    assert torch.allclose(approx, exact, atol=0.05 * float(exact.abs().max()))


def test_bf16_and_int8_mostly_agree_with_fp32(
    trained_ar: AutoregressiveModel,
    trained_padir: PadirModel,
    reversal: tuple[torch.Tensor, torch.Tensor],
) -> None:
    # Rounding moves an argmax only where two tokens nearly tie: most outputs of a trained
    # model stay the same (measured on one CPU: bf16 and int8 both 15 of 16 sentences for AR,
    # 16 of 16 for PaDIR; the bound leaves room for other CPUs' rounding).
    src = reversal[0]

    def outputs(model: nn.Module) -> list[list[int]]:
        with torch.inference_mode():
            if isinstance(model, PadirModel):
                options = RefinementOptions(length_beam=2)
                return [r.tokens for r in refine(model, src, options, 0)]
            assert isinstance(model, AutoregressiveModel)
            return [h[0].tokens for h in beam_search(model, src, SearchOptions(beam=3))]

    for model in (trained_ar, trained_padir):
        fp32 = outputs(model)
        for precision in ("bf16", "int8"):
            other = outputs(at_precision(model, precision))
            same = sum(a == b for a, b in zip(fp32, other, strict=True))
            assert same >= 12, (type(model).__name__, precision, same)


def test_a_precision_outside_the_choices_is_an_error(
    tokenizer: Tokenizer, text_config: ModelConfig
) -> None:
    translator = Translator("ar", build_model("ar", text_config), tokenizer)
    with pytest.raises(GmlmError, match=r"precision='fp16': choose from fp32, bf16, int8"):
        translator.translate(["der Hund."], precision="fp16")  # type: ignore[arg-type]
    with pytest.raises(GmlmError, match=r"precision=True: choose from fp32, bf16, int8"):
        translator.translate_ids([[5, 6]], translator.options(), precision=True)  # type: ignore[arg-type]
