"""The parts of a checkpoint belong together: its meta.json records the tokenizer its weights
were made with, and every loader refuses another one copied into tokenizer/ (same vocabulary
size, so nothing else would notice); an export folder records the checkpoint it was made
from, and `gmlm export --force` replaces only an export of that checkpoint."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from gmlm.checkpoint.export import EXPORTED_FINGERPRINT, export_checkpoint
from gmlm.checkpoint.files import TOKENIZER_KEY
from gmlm.cli.main import main
from gmlm.data.tokenizer import Tokenizer
from gmlm.errors import GmlmError
from gmlm.export import ctranslate2 as ct2
from gmlm.export.ctranslate2_runtime import Ct2Translator
from gmlm.translation.translator import load
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.sentences import sentences

NEEDS_CT2 = pytest.mark.skipif(
    importlib.util.find_spec("ctranslate2") is None,
    reason="the optional extra gmlm[ctranslate2] is not installed",
)
pytestmark = pytest.mark.usefixtures("one_thread")

RELEASED = Path(__file__).resolve().parents[2] / "checkpoints"
NOT_ITS_TOKENIZER = "would encode text into ids this model did not learn"


@pytest.fixture(scope="module")
def other_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """A tokenizer of the same vocabulary size as `tokenizer`, trained on other sentences."""
    other = Tokenizer.train(sentences(300, seed=7), vocab_size=400, threads=1)
    assert other.vocab_size == tokenizer.vocab_size and other != tokenizer
    return other


def _swap_tokenizer(folder: Path, tokenizer: Tokenizer) -> None:
    """Replace the folder's tokenizer/ by `tokenizer`'s files, as a copy from elsewhere would."""
    shutil.rmtree(folder / "tokenizer")
    tokenizer.save(folder / "tokenizer")


# Each loader: how it loads the folder (a checkpoint, or a CTranslate2 export made of one).
LOADERS: dict[str, tuple[str, Callable[[Path, Path], object]]] = {
    "translate (gmlm.load)": ("checkpoint", lambda folder, _tmp: load(folder)),
    "gmlm export": ("checkpoint", lambda folder, tmp: export_checkpoint(folder, tmp / "x", None)),
    "export --format ctranslate2": (
        "checkpoint",
        lambda folder, tmp: ct2.export_ctranslate2(folder, tmp / "x"),
    ),
    "a CTranslate2 export": ("ct2", lambda folder, _tmp: Ct2Translator.load(folder)),
}


@pytest.mark.parametrize(
    "loader",
    [pytest.param(n, marks=NEEDS_CT2) if "ctranslate2" in n.lower() else n for n in LOADERS],
)
def test_every_loader_refuses_a_tokenizer_copied_from_elsewhere(
    loader: str, tokenizer: Tokenizer, other_tokenizer: Tokenizer, tmp_path: Path
) -> None:
    what, load_folder = LOADERS[loader]
    folder = write_checkpoint(tmp_path / "ar", "ar", tokenizer)
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert meta[TOKENIZER_KEY] == tokenizer.fingerprint
    if what == "ct2":
        folder = ct2.export_ctranslate2(folder, tmp_path / "ar-ct2")
    load_folder(folder, tmp_path / "fine")  # its own tokenizer: loads
    _swap_tokenizer(folder, other_tokenizer)
    with pytest.raises(GmlmError, match=NOT_ITS_TOKENIZER):
        load_folder(folder, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_translate_refuses_it_in_one_line_and_older_checkpoints_still_load(
    tokenizer: Tokenizer,
    other_tokenizer: Tokenizer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = write_checkpoint(tmp_path / "padir", "padir", tokenizer)
    _swap_tokenizer(folder, other_tokenizer)
    (tmp_path / "in.txt").write_text("der Hund läuft.\n", encoding="utf-8")
    argv = ["translate", "--checkpoint", str(folder), "--input", str(tmp_path / "in.txt")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gmlm: error: {folder / 'tokenizer'}: its tokenizer") and (
        NOT_ITS_TOKENIZER in err
    )
    # A checkpoint written before meta.json recorded its tokenizer is loaded unchecked.
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    del meta[TOKENIZER_KEY]
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert load(folder).tokenizer == other_tokenizer


@pytest.mark.parametrize("meta", sorted(RELEASED.glob("*/*/meta.json")), ids=str)
def test_released_checkpoints_record_their_tokenizer(meta: Path) -> None:
    recorded = json.loads(meta.read_text(encoding="utf-8"))[TOKENIZER_KEY]
    assert recorded == Tokenizer.load(meta.parent / "tokenizer").fingerprint


# What `gmlm export --force` finds at --out: an export made earlier, from which checkpoint,
# with or without the fingerprint older exports lack; and whether it is replaced.
REPLACE = "replaced"
FORCE_CASES = {
    "an export of the same checkpoint": ("a", True, REPLACE),
    "an export of a copy of the checkpoint": ("copy of a", True, REPLACE),
    "an older export of the same folder": ("a", False, REPLACE),
    "an export of another checkpoint": ("b", True, "holds an export of another checkpoint"),
    "an older export of another checkpoint": ("b", False, "holds an export of another checkpoint"),
}
FORMATS = {"gmlm": "meta.json", "ctranslate2": ct2.INFO_FILE}


@pytest.mark.parametrize("fmt", ["gmlm", pytest.param("ctranslate2", marks=NEEDS_CT2)])
@pytest.mark.parametrize("case", list(FORCE_CASES))
def test_export_force_replaces_only_an_export_of_the_same_checkpoint(
    fmt: str, case: str, tokenizer: Tokenizer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier_source, with_fingerprint, expected = FORCE_CASES[case]
    a = write_checkpoint(tmp_path / "a", "ar", tokenizer, seed=0)
    write_checkpoint(tmp_path / "b", "ar", tokenizer, seed=1)
    shutil.copytree(a, tmp_path / "copy of a")
    out = tmp_path / "exported"

    def export(source: str, *force: str) -> int:
        argv = ["export", "--format", fmt, "--checkpoint", str(tmp_path / source)]
        return main([*argv, "--out", str(out), *force])

    assert export(earlier_source) == 0
    info = out / FORMATS[fmt]
    if not with_fingerprint:
        recorded = json.loads(info.read_text(encoding="utf-8"))
        key = EXPORTED_FINGERPRINT if fmt == "gmlm" else "source_fingerprint"
        del recorded[key]
        info.write_text(json.dumps(recorded), encoding="utf-8")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    status = export("a", "--force")
    err = capsys.readouterr().err
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    if expected == REPLACE:
        assert status == 0, err
        assert json.loads(info.read_text(encoding="utf-8"))["exported_from"] == str(a.resolve())
    else:
        assert status == 2 and expected in err and str(tmp_path / "b") in err, err
        assert after == before
