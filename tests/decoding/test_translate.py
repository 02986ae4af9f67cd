"""Translator (raw text in, text out) and the `gmlm translate` command."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import torch

import gmlm
from gmlm.cli.main import main
from gmlm.data.lengths import OverLengthError
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding import RefinementOptions
from gmlm.errors import GmlmError
from gmlm.models import build_model
from gmlm.nn import ModelConfig
from gmlm.training import checkpoint
from gmlm.training.config import TrainConfig
from gmlm.translate import Translator
from tests.decoding.conftest import WORDS, sentences

LONG = " ".join(WORDS * 3) + "."  # about 60 tokens; the limit is 24


@pytest.fixture(scope="module")
def translators(tokenizer: Tokenizer, text_config: ModelConfig) -> dict[str, Translator]:
    torch.manual_seed(0)
    return {
        kind: Translator(kind, build_model(kind, text_config), tokenizer)  # type: ignore[arg-type]
        for kind in ("ar", "padir")
    }


@pytest.mark.parametrize("kind", ["ar", "padir"])
def test_one_output_per_line_and_empty_lines_stay_empty(
    kind: str, translators: dict[str, Translator]
) -> None:
    lines = ["der Hund läuft.", "", "   ", "die Katze springt über einen Baum.", "\t"]
    out = translators[kind].translate(lines, batch_size=2, max_len_b=4 if kind == "ar" else None)
    assert len(out) == len(lines)
    assert out[1] == out[2] == out[4] == "" and out[0] and out[3]
    assert not any("\n" in line or "\r" in line for line in out)
    assert translators[kind].translate([]) == []


def test_batching_and_sorting_do_not_change_outputs(translators: dict[str, Translator]) -> None:
    # AR greedy is deterministic, so each line must get what it gets alone.
    lines = sentences(7, seed=4)
    batched = translators["ar"].translate(lines, batch_size=3, max_len_b=4)
    alone = [translators["ar"].translate([line], max_len_b=4)[0] for line in lines]
    assert batched == alone
    assert any(batched)


def test_padir_seed_makes_runs_repeatable(translators: dict[str, Translator]) -> None:
    lines = sentences(4, seed=5)
    first = translators["padir"].translate(lines, seed=3, steps=2, length_beam=2)
    assert translators["padir"].translate(lines, seed=3, steps=2, length_beam=2) == first


def test_over_length_is_an_error_naming_line_and_limit(
    translators: dict[str, Translator],
) -> None:
    with pytest.raises(OverLengthError, match=r"corpus\.de: 1 sentence.*line 3 \(\d+ tokens\)"):
        translators["ar"].translate(["der Hund.", "", LONG], origin="corpus.de")
    with pytest.raises(OverLengthError, match="max_len=24"):
        translators["padir"].translate([LONG])


def test_over_length_split_at_punctuation(translators: dict[str, Translator]) -> None:
    translator = translators["ar"]
    text = " ".join(sentences(12, seed=6))
    pieces = translator._split(text, 0, 24, "input")
    assert len(pieces) > 1 and all(len(p) + 1 <= 24 for p in pieces)
    joined = translator.tokenizer.decode([i for p in pieces for i in p])
    assert joined.replace(" ", "") == text.replace(" ", "")
    out = translator.translate(["der Hund.", text], on_over_length="split", max_len_b=4)
    assert len(out) == 2 and out[1]
    with pytest.raises(OverLengthError, match=r"line 2.*splitting it at sentence punctuation"):
        translator.translate(["der Hund.", LONG], on_over_length="split")


def test_over_length_report_leaves_the_line_empty_with_a_warning(
    translators: dict[str, Translator],
) -> None:
    with pytest.warns(UserWarning, match=r"line 2 \(\d+ tokens\)"):
        out = translators["padir"].translate(["der Hund.", LONG], on_over_length="report")
    assert len(out) == 2 and out[1] == ""


def test_settings_of_the_other_kind_name_the_checkpoint_kind(
    translators: dict[str, Translator],
) -> None:
    with pytest.raises(GmlmError, match=r"beam only applies to an autoregressive.*kind 'padir'"):
        translators["padir"].translate(["der Hund."], beam=5)
    with pytest.raises(GmlmError, match=r"steps, remask only apply to a PaDIR.*kind 'ar'"):
        translators["ar"].translate(["der Hund."], steps=4, remask="linear")
    with pytest.raises(GmlmError, match="needs a PadirModel"):
        Translator("padir", translators["ar"].model, translators["ar"].tokenizer)


def test_decoding_settings_reach_the_decoder(translators: dict[str, Translator]) -> None:
    options = translators["padir"].options(steps=7, length_offsets=[-1, 1], dedup_final=False)
    assert (options.steps, options.length_offsets, options.dedup_final) == (7, (-1, 1), False)
    assert options.length_penalty == 0.0 and options.drop_unchanged_initial
    ar = translators["ar"].options(beam=4)
    assert (ar.beam, ar.length_penalty) == (4, 0.6)


def save_checkpoint(folder: Path, translator: Translator, config: ModelConfig) -> Path:
    """The translator's model and tokenizer as a real checkpoint folder (the trainer's writer)."""
    cfg = TrainConfig(kind=translator.kind, model=config)  # type: ignore[arg-type]
    checkpoint.write_checkpoint_dir(
        folder,
        lambda tmp: checkpoint.fill_inference_files(
            tmp, translator.model, cfg, translator.tokenizer, {"step": 0}
        ),
    )
    return folder


@pytest.fixture
def checkpoint_dir(
    tmp_path: Path, translators: dict[str, Translator], text_config: ModelConfig
) -> Path:
    """The PaDIR translator saved as a checkpoint folder."""
    return save_checkpoint(tmp_path / "ckpt", translators["padir"], text_config)


def test_gmlm_load_gives_a_translator(
    checkpoint_dir: Path, translators: dict[str, Translator]
) -> None:
    translator = gmlm.load(checkpoint_dir, device="cpu")
    assert translator.kind == "padir"
    original = translators["padir"].model.state_dict()
    loaded = translator.model.state_dict()
    assert loaded.keys() == original.keys()
    assert all(torch.equal(loaded[name], original[name]) for name in original)
    lines = sentences(3, seed=8)
    out = translator.translate(lines)
    assert out == translators["padir"].translate(lines) and all(out)


def test_cli_file_round_trip(
    checkpoint_dir: Path, tmp_path: Path, translators: dict[str, Translator]
) -> None:
    lines = ["der Hund läuft.", "", "die Katze springt.", "das ist ein Baum."]
    source = tmp_path / "in.de"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    target = tmp_path / "out" / "hyp.en"
    args = ["translate", "--checkpoint", str(checkpoint_dir), "--input", str(source)]
    assert main([*args, "--output", str(target), "--steps", "2", "--seed", "1"]) == 0
    written = target.read_bytes().decode("utf-8").split("\n")
    assert written[-1] == "" and len(written) - 1 == len(lines)
    expected = translators["padir"].translate(lines, steps=2, seed=1)
    assert written[:-1] == expected
    assert written[1] == "" and all(expected[i] for i in (0, 2, 3))


def test_cli_beam_search_from_an_ar_checkpoint(
    tmp_path: Path, translators: dict[str, Translator], text_config: ModelConfig
) -> None:
    translator = translators["ar"]
    folder = save_checkpoint(tmp_path / "ar", translator, text_config)
    lines = ["der Hund läuft.", "", "die Katze springt."]
    source = tmp_path / "in.de"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = tmp_path / "out.en"
    args = ["--checkpoint", str(folder), "--input", str(source), "--output", str(target)]
    assert main(["translate", *args, "--beam", "2", "--device", "cpu"]) == 0
    expected = translator.translate(lines, beam=2)
    assert target.read_bytes().decode("utf-8") == "".join(f"{line}\n" for line in expected)


def test_cli_stdin_to_stdout(
    checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = "\ufeffder Hund.\n\ndie Katze.".encode()  # BOM, blank line, no final newline
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    used = []
    original = Translator.options

    def spy(self, **settings):  # type: ignore[no-untyped-def]
        used.append(original(self, **settings))
        return used[-1]

    monkeypatch.setattr(Translator, "options", spy)
    args = ["--length-offsets=-1,1", "--no-dedup", "--keep-initial-tokens", "--remask", "linear"]
    assert main(["translate", "--checkpoint", str(checkpoint_dir), *args]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and out.split("\n")[1] == ""
    (options,) = used
    assert options == RefinementOptions(
        length_offsets=(-1, 1), dedup_final=False, drop_unchanged_initial=False, remask="linear"
    )


def test_cli_errors_are_clean(
    checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "latin1.de"
    bad.write_bytes("der Hund.\nok\nFu\xdfball\n".encode("latin-1"))
    target = tmp_path / "hyp.en"
    target.write_text("previous\n", encoding="utf-8")
    base = ["translate", "--checkpoint", str(checkpoint_dir), "--output", str(target)]
    assert main([*base, "--input", str(bad)]) == 2
    assert f"{bad}:3: invalid UTF-8" in capsys.readouterr().err
    good = tmp_path / "in.de"
    good.write_text("der Hund.\n", encoding="utf-8")
    assert main([*base, "--input", str(good), "--beam", "5"]) == 2
    assert "kind 'padir'" in capsys.readouterr().err
    long_input = tmp_path / "long.de"
    long_input.write_text(f"der Hund.\n{LONG}\n", encoding="utf-8")
    assert main([*base, "--input", str(long_input)]) == 2
    assert "line 2" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8") == "previous\n"  # failed runs leave it alone
    assert main([*base, "--input", str(long_input), "--over-length", "report"]) == 0
    assert "gmlm: warning:" in capsys.readouterr().err
    assert target.read_text(encoding="utf-8").split("\n")[1:] == ["", ""]
