"""Settings that leave every output empty, inputs with nothing in them and empty lists where an
item is needed are reported, an error or a warning on stderr, never a silent exit status 0.
One table walks every command where they can occur.
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import pytest

from gmlm.data.tokenizer import Tokenizer
from gmlm.translation.lines import EmptyTranslationsWarning
from gmlm.translation.translator import load
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.cli import exit_status
from tests.helpers.sentences import sentences

EVERY_OUTPUT_EMPTY = "was translated to an empty line"
NOTHING_TO_TRANSLATE = "holds no non-empty line"
LIST_NEEDED = "expected comma-separated"


@pytest.fixture(scope="module")
def checkpoints(tokenizer: Tokenizer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("empty")
    return {kind: write_checkpoint(root / kind, kind, tokenizer) for kind in ("ar", "padir")}


def _files(tmp: Path) -> dict[str, Path]:
    """Input files: sentences, blank lines only, nothing at all, and references."""
    texts = {
        "sentences": "".join(s + "\n" for s in sentences(3)),
        "blank": "\n  \n\n",
        "empty": "",
        "refs": "a dog runs .\na cat .\nthe end .\n",
    }
    paths = {}
    for name, text in texts.items():
        paths[name] = tmp / f"{name}.txt"
        paths[name].write_text(text, encoding="utf-8")
    return paths


# Each row: the arguments ({padir}, {ar} the checkpoints, {NAME} a file of _files), the text
# on standard input (None: none read), the exit status and what stderr must say.
TABLE: dict[str, tuple[str, str | None, int, str]] = {
    "translate: PaDIR lengths shifted below zero": (
        "translate --checkpoint {padir} --input {sentences} --length-shift=-63",
        None,
        0,
        EVERY_OUTPUT_EMPTY,
    ),
    "translate: AR outputs of EOS only": (
        "translate --checkpoint {ar} --input {sentences} --max-len-a=0 --max-len-b=1",
        None,
        0,
        EVERY_OUTPUT_EMPTY,
    ),
    "translate: a file of blank lines": (
        "translate --checkpoint {padir} --input {blank}",
        None,
        0,
        NOTHING_TO_TRANSLATE,
    ),
    "translate: nothing on stdin": ("translate --checkpoint {ar}", "", 0, NOTHING_TO_TRANSLATE),
    "evaluate: references all blank": (
        "evaluate --hyp {sentences} --ref {blank}",
        None,
        2,
        "reference line(s) are empty",
    ),
    "evaluate: hypotheses all blank": (
        "evaluate --hyp {blank} --ref {refs}",
        None,
        0,
        "every line of --hyp",
    ),
    "evaluate: empty files": ("evaluate --hyp {empty} --ref {empty}", None, 2, "nothing to score"),
    "loadtest: a file of blank lines": (
        "loadtest --model x --input {blank}",
        None,
        2,
        "at least one non-empty sentence",
    ),
    "loadtest: --rates ''": ("loadtest --rates=", None, 2, LIST_NEEDED),
    "bench: --batch-sizes ''": ("bench --replot {refs} --batch-sizes=", None, 2, LIST_NEEDED),
    "theory verify: --couplings ','": ("theory verify --couplings=,", None, 2, LIST_NEEDED),
    "theory figure1: --sizes ''": ("theory figure1 --sizes=", None, 2, LIST_NEEDED),
    "theory figure3: --ks ''": ("theory figure3 --ks=", None, 2, LIST_NEEDED),
    "reproduce: --stages ','": ("reproduce --stages=,", None, 2, "names no stage"),
    "reproduce: --stages ''": ("reproduce --stages=", None, 2, "names no stage"),
    "reproduce: --redo ''": ("reproduce --redo=", None, 2, "names no stage"),
}


@pytest.mark.parametrize("case", list(TABLE))
def test_empty_results_and_empty_inputs_are_reported(
    case: str,
    checkpoints: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, stdin, status, message = TABLE[case]
    names = {**{k: str(v) for k, v in checkpoints.items()}, **_files(tmp_path)}
    monkeypatch.chdir(tmp_path)  # reproduce refuses before writing runs/ here
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    assert exit_status([arg.format(**names) for arg in argv.split()]) == status
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("kind", "settings", "warns"),
    [
        ("padir", {"length_shift": -63}, True),
        ("ar", {"max_length": 1}, True),
        ("padir", {}, False),
        ("ar", {}, False),
    ],
)
def test_translator_warns_when_every_output_is_empty(
    kind: str, settings: dict[str, int], warns: bool, checkpoints: dict[str, Path]
) -> None:
    """The Python API warns too, naming the settings; blank lines alone do not count, and a
    translation that is not all empty does not warn."""
    translator = load(checkpoints[kind])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs = translator.translate([*sentences(3), ""], **settings)
    said = [str(w.message) for w in caught if w.category is EmptyTranslationsWarning]
    assert outputs[-1] == ""
    if warns:
        assert outputs == ["", "", "", ""]
        assert len(said) == 1 and "every one of the 3 non-empty line(s)" in said[0]
        assert EVERY_OUTPUT_EMPTY in said[0]
        name, value = next(iter(settings.items()))
        assert f"{name}={value}" in said[0]
    else:
        assert any(outputs[:3]) and said == []
