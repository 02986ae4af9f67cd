"""The analyses' decode loop (gmlm.analysis.batches): the sources in `gmlm translate`'s order,
each batch carrying the lines of its sentences and the seed."""

from __future__ import annotations

from gmlm.analysis.batches import source_batches
from gmlm.data.tokenizer import Tokenizer
from gmlm.models import build_model
from gmlm.nn import ModelConfig
from gmlm.translation.translator import Translator


def test_longest_first_stable_with_lines_and_seed(
    tokenizer: Tokenizer, text_config: ModelConfig
) -> None:
    translator = Translator("padir", build_model("padir", text_config), tokenizer)  # type: ignore[arg-type]
    sources = [[5, 6, 7], [5, 6, 7, 8, 9], [7, 8, 9], [9]]
    batches = list(
        source_batches(
            translator, sources, [10, 11, 12, 13], batch_size=2, seed=3, desc="t", progress=False
        )
    )
    assert [b.rows for b in batches] == [[1, 0], [2, 3]]  # equal lengths keep their order
    assert [b.lines for b in batches] == [[11, 10], [12, 13]]
    eos, pad = text_config.eos_id, text_config.pad_id
    assert batches[0].src.tolist() == [[5, 6, 7, 8, 9, eos], [5, 6, 7, eos, pad, pad]]
    assert {b.seed for b in batches} == {3}
