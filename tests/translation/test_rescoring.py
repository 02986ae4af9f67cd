"""A PaDIR translator whose candidates an autoregressive translator rescores: what it
accepts, that it changes the choice the way the decoding layer says, and `gmlm translate
--rescore`."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import gmlm
from gmlm.checkpoint.languages import Languages
from gmlm.cli.main import main
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.refinement import refine
from gmlm.decoding.rescoring import rescorer
from gmlm.errors import GmlmError
from gmlm.models import build_model
from gmlm.nn import ModelConfig
from gmlm.translation.translator import Translator
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.cli import exit_status
from tests.helpers.sentences import sentences


def translator(kind: str, config: ModelConfig, tokenizer: Tokenizer, seed: int) -> Translator:
    torch.manual_seed(seed)
    return Translator(kind, build_model(kind, config), tokenizer)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pair(tokenizer: Tokenizer, text_config: ModelConfig) -> tuple[Translator, Translator]:
    return translator("padir", text_config, tokenizer, 0), translator(
        "ar", text_config, tokenizer, 1
    )


def test_rescored_translations_are_the_rescored_choice(pair: tuple[Translator, Translator]) -> None:
    """The translator's output equals refine() with the rescoring model's scores, line by
    line, alone or batched; and rescoring changes some line (weight 1e6: its choice)."""
    padir, ar = pair
    lines = sentences(8, seed=3)
    options = padir.options(prune_after=0)
    plain = padir.translate(lines, options)
    padir.rescore_with(ar, 1e6)
    try:
        rescored = padir.translate(lines, options)
        alone = [padir.translate([line], options)[0] for line in lines]
        in_bf16 = padir.translate(lines, options, precision="bf16")  # the AR model's copy too
    finally:
        padir.rescore_with(None)
    assert padir.translate(lines, options) == plain  # None: back to PaDIR's own choice
    expected = []
    for line in lines:
        src = padir.source_tensor([padir.tokenizer.encode(line)])
        with torch.inference_mode():
            (result,) = refine(
                padir.model, src, options, rescore=rescorer(ar.model, src, options, 1e6)
            )
        expected.append(padir.text(result.tokens, options))
    assert rescored == alone == expected
    assert len(in_bf16) == len(lines) and all(in_bf16)
    assert rescored != plain


@pytest.mark.parametrize("weight", [0.0, -1.0, math.nan, math.inf, "x", None])
def test_a_bad_weight_is_refused(pair: tuple[Translator, Translator], weight: object) -> None:
    padir, ar = pair
    with pytest.raises(GmlmError, match="weight"):
        padir.rescore_with(ar, weight)  # type: ignore[arg-type]
    assert padir.rescoring is None


def test_what_cannot_rescore_is_refused(
    pair: tuple[Translator, Translator], tokenizer: Tokenizer, text_config: ModelConfig
) -> None:
    padir, ar = pair
    other_tokens = Tokenizer.train(sentences(200, seed=9), vocab_size=300, threads=1)
    shorter = replace(text_config, max_target_len=12)
    # One tokenizer, two directions (a joint vocabulary): the languages tell them apart.
    de_en = Translator("padir", padir.model, tokenizer, languages=Languages(("de", "en"), "a test"))
    en_de = Translator("ar", ar.model, tokenizer, languages=Languages(("en", "de"), "a test"))
    de_en.rescore_with(Translator("ar", ar.model, tokenizer))  # one pair unknown: not checked
    assert de_en.rescoring is not None and de_en.rescoring[1] == 1.0  # the default weight
    de_en.rescore_with(None)
    cases = {
        "must be PaDIR and the rescoring one autoregressive": [(ar, ar), (padir, padir)],
        "tokenizers differ": [
            (
                padir,
                translator(
                    "ar", replace(text_config, vocab_size=other_tokens.vocab_size), other_tokens, 1
                ),
            )
        ],
        "max_target_len 12 is below": [(padir, translator("ar", shorter, tokenizer, 1))],
        "different language pairs (de-en, en-de)": [(de_en, en_de)],
    }
    for message, pairs in cases.items():
        for rescored, rescoring in pairs:
            with pytest.raises(GmlmError, match=re.escape(message)):
                rescored.rescore_with(rescoring)
            assert rescored.rescoring is None


def test_cli_rescore(
    tmp_path: Path, tokenizer: Tokenizer, capsys: pytest.CaptureFixture[str]
) -> None:
    padir = write_checkpoint(tmp_path / "padir", "padir", tokenizer)
    ar = write_checkpoint(tmp_path / "ar", "ar", tokenizer, seed=1)
    lines = sentences(5, seed=2)
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    args = ["translate", "--checkpoint", str(padir), "--input", str(source), "--prune-after", "0"]
    out = tmp_path / "out.txt"
    assert main([*args, "--rescore", str(ar), "--rescore-weight", "3", "--output", str(out)]) == 0
    assert "rescored by" in capsys.readouterr().err
    expected = gmlm.load(padir, device="cpu")
    expected.rescore_with(gmlm.load(ar, device="cpu"), 3.0)
    assert out.read_text(encoding="utf-8").splitlines() == expected.translate(lines, prune_after=0)
    failures = {
        "needs --rescore": ["--rescore-weight", "2"],
        "must be PaDIR and the rescoring one autoregressive": ["--rescore", str(padir)],
        "checkpoint not found": ["--rescore", str(tmp_path / "missing")],
        "--rescore-weight: 0 must be in (0, 1e+06]": [
            "--rescore",
            str(ar),
            "--rescore-weight",
            "0",
        ],
    }
    for message, extra in failures.items():
        assert exit_status([*args, *extra, "--output", str(tmp_path / "no.txt")]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
        assert not (tmp_path / "no.txt").exists()
