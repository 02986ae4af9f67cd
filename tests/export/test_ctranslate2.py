"""CTranslate2 export of the AR model: the converted network computes gmlm's log-probabilities,
and decoding by gmlm's rules on CTranslate2 gives gmlm's greedy and beam search results."""

from __future__ import annotations

import errno
import gzip
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from gmlm.checkpoint.files import fill_inference_files, write_checkpoint_dir
from gmlm.cli.main import main
from gmlm.data import load_dataset
from gmlm.data.tokenizer import Tokenizer
from gmlm.decoding.autoregressive import SearchOptions, beam_search, greedy_search
from gmlm.errors import GmlmError
from gmlm.models import AutoregressiveModel, build_model, teacher_forcing_input
from gmlm.nn import preset
from gmlm.training.config import TrainConfig
from gmlm.translation.translator import Translator, load
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.corpora import MULTI30K

pytest.importorskip("ctranslate2", reason="the optional extra gmlm[ctranslate2] is not installed")

from gmlm.export.ctranslate2 import INFO_FILE, Ct2ModelInfo, export_ctranslate2
from gmlm.export.ctranslate2_runtime import Ct2Translator, length_limit

pytestmark = pytest.mark.usefixtures("one_thread")

RELEASED_AR = Path(__file__).resolve().parents[2] / "checkpoints" / "multi30k-de-en" / "ar"
# Greedy and beam search with the defaults, with a length limit most outputs reach, and
# with another beam, alpha and limit.
OPTIONS = [
    SearchOptions(beam=1),
    SearchOptions(beam=5),
    SearchOptions(beam=5, max_len_a=0.0, max_len_b=4),
    SearchOptions(beam=3, length_penalty=1.0, max_len_a=0.5, max_len_b=2),
]


def write_decisive_ar(folder: Path, tokenizer: Tokenizer) -> Path:
    """A tiny random AR model with a trained model's habits, as a checkpoint folder.

    Weights of unit scale (the init's 0.02 gives near-uniform outputs that ignore the source),
    an end of sentence likely enough that outputs stop at many lengths, and special tokens
    other than EOS improbable (about e^-20), as training makes them: CTranslate2 removes
    them before its softmax and gmlm after, which changes scores by the probability the
    model gives them (module docstring of gmlm.export.ctranslate2_runtime)."""
    config = preset(
        "tiny",
        vocab_size=tokenizer.vocab_size,
        max_source_len=64,
        max_target_len=64,
        tie_embeddings=False,
    )
    torch.manual_seed(0)
    model = build_model("ar", config)
    assert isinstance(model, AutoregressiveModel)
    d = config.d_model
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(std=d**-0.5)
        model.encoder.positions.table.weight.normal_()
        model.target_positions.table.weight.normal_()
        # Dimension 0 of the final norm's output is a constant 30; only EOS and the
        # refused ids read it.
        model.final_norm.bias.zero_()
        model.final_norm.bias[0] = 30.0
        output = model.embeddings.output
        assert output is not None
        output.weight.normal_(std=1.5 * d**-0.5)
        output.weight[:, 0] = 0.0
        for i in range(config.n_special):
            if i != config.eos_id:
                output.weight[i] = 0.0
                output.weight[i, 0] = -1.0
        output.weight[config.eos_id, 0] = 2.5 / 30.0
    cfg = TrainConfig(kind="ar", model=config)
    write_checkpoint_dir(folder, lambda tmp: fill_inference_files(tmp, model, cfg, tokenizer, {}))
    return folder


@pytest.fixture(scope="module")
def tiny(
    word_task_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Translator, Ct2Translator]:
    root = tmp_path_factory.mktemp("ct2")
    ckpt = write_decisive_ar(root / "ar", load_dataset(word_task_data).tokenizer)
    export_ctranslate2(ckpt, root / "ct2")
    return load(ckpt, device="cpu"), Ct2Translator.load(root / "ct2", threads=1)


def random_sources(vocab: int, count: int, seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 12, (count,), generator=generator).tolist()
    return [torch.randint(6, vocab, (n,), generator=generator).tolist() for n in lengths]


def gmlm_best(model: AutoregressiveModel, source: list[int], options: SearchOptions):  # type: ignore[no-untyped-def]
    src = torch.tensor([[*source, model.config.eos_id]])
    if options.beam == 1:
        return greedy_search(model, src, options)[0]
    return beam_search(model, src, options)[0][0]


def check_same_search(
    translator: Translator, ct2: Ct2Translator, sources: list[list[int]], options: SearchOptions
) -> list[int]:
    """Assert CTranslate2's best = gmlm's, with scores to 1e-4 once rescored; returns the
    output lengths with EOS."""
    assert isinstance(translator.model, AutoregressiveModel)
    plain = ct2.search(sources, options)
    rescored = ct2.search(sources, options, rescore=True)
    lengths = []
    for source, fast, exact in zip(sources, plain, rescored, strict=True):
        expected = gmlm_best(translator.model, source, options)
        assert fast.tokens == expected.tokens
        assert exact.tokens == expected.tokens
        assert exact.log_prob == pytest.approx(expected.log_prob, abs=1e-4)
        assert exact.score == pytest.approx(expected.score, abs=1e-4)
        lengths.append(len(expected.tokens) + 1)
    return lengths


def test_converted_model_computes_gmlm_log_probs(tiny: tuple[Translator, Ct2Translator]) -> None:
    translator, ct2 = tiny
    sources = random_sources(translator.config.vocab_size, 4, seed=5)
    targets = random_sources(translator.config.vocab_size, 4, seed=6)
    scored = ct2.translator.score_batch(
        [[ct2.pieces[t] for t in s] for s in sources],
        [[ct2.pieces[t] for t in t_] for t_ in targets],
        max_input_length=0,
    )
    eos = translator.config.eos_id
    for source, target, result in zip(sources, targets, scored, strict=True):
        tgt = torch.tensor([[*target, eos]])
        with torch.no_grad():
            logits = translator.model(
                torch.tensor([[*source, eos]]), teacher_forcing_input(tgt, translator.config)
            )
        expected = logits.log_softmax(-1)[0].gather(1, tgt[0, :, None])[:, 0]
        assert result.log_probs == pytest.approx(expected.tolist(), abs=1e-4)


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: f"beam{o.beam}-b{o.max_len_b}")
def test_search_equals_gmlm_on_a_tiny_model(
    tiny: tuple[Translator, Ct2Translator], options: SearchOptions
) -> None:
    translator, ct2 = tiny
    sources = random_sources(translator.config.vocab_size, 24, seed=1)
    lengths = check_same_search(translator, ct2, sources, options)
    limits = [length_limit(len(s) + 1, options, translator.config.max_target_len) for s in sources]
    # Both ways of ending occur: EOS before the limit, and EOS forced at it.
    assert any(n < limit for n, limit in zip(lengths, limits, strict=True))
    assert any(n == limit for n, limit in zip(lengths, limits, strict=True))
    assert len(set(lengths)) > 2


@pytest.mark.skipif(not (RELEASED_AR / "model.safetensors").is_file(), reason="no released AR")
@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k not found at {MULTI30K}")
@pytest.mark.parametrize(
    "count", [4, pytest.param(30, marks=pytest.mark.slow)], ids=lambda n: f"{n}-sentences"
)
def test_search_equals_gmlm_on_the_released_ar(tmp_path: Path, count: int) -> None:
    """The first `count` Multi30k test sentences (4 in the fast tier: the released model's
    beam search takes about 0.3 s a sentence on a busy CPU core; 30 with -m slow)."""
    translator = load(RELEASED_AR, device="cpu")
    ct2 = Ct2Translator.load(export_ctranslate2(RELEASED_AR, tmp_path / "ct2"), threads=1)
    with gzip.open(MULTI30K / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as lines:
        texts = [next(lines).strip() for _ in range(count)]
    sources = [translator.tokenizer.encode(t) for t in texts]
    for options in (SearchOptions(beam=1), SearchOptions(beam=5)):
        check_same_search(translator, ct2, sources, options)
    assert ct2.translate(texts[:2], SearchOptions(beam=5)) == translator.translate(
        texts[:2], beam=5
    )


@pytest.mark.skipif(not (RELEASED_AR / "model.safetensors").is_file(), reason="no released AR")
def test_an_export_records_the_language_pair_of_its_checkpoint(tmp_path: Path) -> None:
    path = export_ctranslate2(RELEASED_AR, tmp_path / "ct2") / INFO_FILE
    data = json.loads(path.read_text(encoding="utf-8"))
    assert Ct2ModelInfo.from_json(data, str(path)).languages == "de-en"  # its meta.json's
    del data["languages"]  # an export written before gmlm recorded the pair still loads
    assert Ct2ModelInfo.from_json(data, str(path)).languages is None
    with pytest.raises(GmlmError, match="not a gmlm CTranslate2 export"):
        Ct2ModelInfo.from_json({**data, "extra": 1}, str(path))


def test_export_folder_and_text_translation(
    tiny: tuple[Translator, Ct2Translator], word_task_data: Path
) -> None:
    translator, ct2 = tiny
    assert {p.name for p in ct2.folder.iterdir()} == {
        "model.bin",
        "config.json",
        "shared_vocabulary.json",
        INFO_FILE,
        "tokenizer",
    }
    texts = [*load_dataset(word_task_data).read_text("test", "src")[:5], ""]
    options = SearchOptions(beam=5)
    assert ct2.translate(texts, options) == translator.translate(texts, beam=5)


def test_export_replaces_an_export_with_force_and_refuses_other_folders(
    tiny: tuple[Translator, Ct2Translator], tmp_path: Path
) -> None:
    _, ct2 = tiny
    source = Path(ct2.info.exported_from)
    out = export_ctranslate2(source, tmp_path / "ct2")
    with pytest.raises(GmlmError, match="holds a CTranslate2 export written earlier; pass --force"):
        export_ctranslate2(source, out)
    assert export_ctranslate2(source, out, force=True) == out  # an export is replaced
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # nothing left over
    with pytest.raises(GmlmError, match="is the --checkpoint folder this command reads"):
        export_ctranslate2(source, source, force=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(GmlmError, match="not a CTranslate2 export"):
        export_ctranslate2(source, other)
    assert (other / "notes.txt").read_text() == "mine"


def test_export_refuses_a_padir_checkpoint(word_task_data: Path, tmp_path: Path) -> None:
    padir = write_checkpoint(tmp_path / "padir", "padir", load_dataset(word_task_data).tokenizer)
    with pytest.raises(GmlmError, match=r"kind 'padir'.*autoregressive"):
        export_ctranslate2(padir, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_export_format_ctranslate2(
    tiny: tuple[Translator, Ct2Translator],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, ct2 = tiny
    args = ["export", "--format", "ctranslate2", "--checkpoint", ct2.info.exported_from]
    assert main([*args, "--out", str(tmp_path / "ct2")]) == 0
    assert Ct2Translator.load(tmp_path / "ct2").info == ct2.info
    (tmp_path / "file").write_text("x")
    assert main([*args, "--out", str(tmp_path / "file")]) == 2
    assert "not a CTranslate2 export" in capsys.readouterr().err


def test_a_full_disk_is_one_line_and_keeps_the_earlier_export(
    tiny: tuple[Translator, Ct2Translator],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import ctranslate2

    _, ct2 = tiny
    out = tmp_path / "ct2"
    args = ["export", "--format", "ctranslate2", "--checkpoint", ct2.info.exported_from]
    assert main([*args, "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def full(self: object, output_dir: str) -> None:
        (Path(output_dir) / "model.bin").write_bytes(b"half")  # then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ctranslate2.specs.TransformerSpec, "save", full)
    capsys.readouterr()
    assert main([*args, "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"gmlm: error: cannot write {out}: No space left on device; free some space or choose "
        "another path\n"
    )
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ct2"]


def test_missing_ctranslate2_names_the_extra(
    tiny: tuple[Translator, Ct2Translator], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, ct2 = tiny
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import fails
    with pytest.raises(GmlmError, match=r"pip install 'gmlm\[ctranslate2\]'"):
        export_ctranslate2(ct2.info.exported_from, tmp_path / "ct2")
    with pytest.raises(GmlmError, match=r"gmlm\[ctranslate2\]"):
        Ct2Translator.load(ct2.folder)
