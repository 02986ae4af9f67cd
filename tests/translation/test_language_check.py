"""The input language check (gmlm.translation.language_check) at every entry point: one table
of lines, each with what the check must say of it for the shipped checkpoints of each direction
(checkpoints/multi30k-*/ar1, which record their language pairs), run through `gmlm translate`,
its torchrun path (one process), the Python API and the service (a checkpoint and its
CTranslate2 export), with and without strict."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from gmlm.cli.main import main
from gmlm.errors import GmlmError
from gmlm.translation.language_check import (
    SHOWN,
    Flag,
    LanguageCheckError,
    LanguageWarning,
    flag_lines,
    listing,
)
from gmlm.translation.translator import load
from tests.helpers.cli import exit_status
from tests.helpers.serving import GatedBackend, running

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTS = {
    "de-en": ROOT / "checkpoints" / "multi30k-de-en" / "ar1",
    "en-de": ROOT / "checkpoints" / "multi30k-en-de" / "ar1",
}

GERMAN = "Ein Mann fährt mit einem roten Fahrrad über eine Brücke."
ENGLISH = "Two young men are playing football in a park."
FRENCH = "Un homme traverse un pont sur un vélo rouge."
COLOURED = "Ein Mann fährt mit einem \x1b[31mroten\x1b[0m Fahrrad über eine Brücke."
DASHED = "Two young men \x96 brothers \x96 are playing football in a park."

# What the check must say: None (nothing), ("language", the language named), ("no_letters",),
# ("control",).
Expected = tuple[str, ...] | None


class Row(NamedTuple):
    what: str
    direction: str
    line: str
    expected: Expected


TABLE = [
    Row("German into the German-source model", "de-en", GERMAN, None),
    Row("English into the English-source model", "en-de", ENGLISH, None),
    Row("German into the English-source model", "en-de", GERMAN, ("language", "de")),
    Row("English into the German-source model", "de-en", ENGLISH, ("language", "en")),
    Row("French into the English-source model", "en-de", FRENCH, ("language", "fr")),
    Row("French into the German-source model", "de-en", FRENCH, ("language", "fr")),
    # (a NUL, which no file may hold, comes only through the API and the service: below)
    Row("control characters alone", "en-de", "\x07\x07\x07", ("no_letters",)),
    Row("an escape code in German text", "de-en", COLOURED, ("control",)),
    Row("a C1 control (a Windows dash decoded as Latin-1)", "en-de", DASHED, ("control",)),
    Row("punctuation only", "de-en", "!!! ... ???", ("no_letters",)),
    # (the identifier gives English 0.0006 and German 0.005: flagged, were they judged)
    Row("a 2-word German line: too short to judge", "en-de", "Zwei Männer", None),
    Row("a 2-word English line: too short to judge", "de-en", "Young children", None),
    Row("a blank line", "en-de", "", None),
]


class Outcome(NamedTuple):
    """What an entry point did: translated (with these flags) or refused (naming these)."""

    refused: bool
    flags: dict[int, Expected]


# A message's listing of flagged lines: "  line 3: German (de, ...", "  text[2]: no letters ..."
LISTED = re.compile(r"^\s+(?:line (\d+)|text\[(\d+)\]): (.*)$", re.M)


def listed(message: str) -> dict[int, Expected]:
    """The flagged lines a warning or error message names, by 0-based index."""
    found: dict[int, Expected] = {}
    for line, item, why in LISTED.findall(message):
        index = int(line) - 1 if line else int(item)
        named = re.match(r"\w+ \((\w+),", why)
        control = why.startswith("a control character")
        found[index] = (
            ("language", named[1]) if named else (("control",) if control else ("no_letters",))
        )
        assert named or control or why.startswith("no letters"), why
    return found


@cache
def translator(direction: str) -> Any:
    return load(CHECKPOINTS[direction], device="cpu")


def cached_load(checkpoint: str | Path, *args: Any, **kwargs: Any) -> Any:
    """`load` for the CLI's and the torchrun path's: the shipped checkpoint's translator,
    loaded once per module."""
    return translator(next(d for d, p in CHECKPOINTS.items() if Path(checkpoint) == p))


@pytest.fixture
def fast_load(monkeypatch: pytest.MonkeyPatch) -> None:
    import gmlm.translation.sharded
    import gmlm.translation.translator

    monkeypatch.setattr(gmlm.translation.translator, "load", cached_load)
    monkeypatch.setattr(gmlm.translation.sharded, "load", cached_load)


def via_cli(
    direction: str, lines: list[str], strict: bool, tmp: Path, capsys: pytest.CaptureFixture
) -> Outcome:
    source = tmp / "in.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    argv = ["translate", "--checkpoint", str(CHECKPOINTS[direction]), "--input", str(source)]
    status = main(argv + (["--strict"] if strict else []))
    out, err = capsys.readouterr()
    assert status in (0, 2), err
    if status == 0:
        assert len(out.splitlines()) == len(lines)
    else:
        assert out == "" and "gmlm: error:" in err and "--strict" in err
    return Outcome(status == 2, listed(err))


def via_sharded(direction: str, lines: list[str], strict: bool, tmp: Path, _: Any) -> Outcome:
    from gmlm.translation.sharded import translate_file

    output = tmp / f"out-{direction}-{strict}-{len(lines)}.txt"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            translate_file(
                CHECKPOINTS[direction],
                lines,
                output,
                origin="in.txt",
                device="cpu",
                say=lambda _message: None,
                check_language="strict" if strict else "warn",
            )
        except LanguageCheckError as err:
            assert not output.exists()
            return Outcome(True, listed(str(err)))
    assert len(output.read_text(encoding="utf-8").splitlines()) == len(lines)
    return Outcome(False, _warned(caught))


def via_python(direction: str, lines: list[str], strict: bool, _: Path, __: Any) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outputs = translator(direction).translate(
                lines, check_language="strict" if strict else "warn"
            )
        except LanguageCheckError as err:
            assert {f.index for f in err.flags} == set(listed(str(err)))
            return Outcome(True, listed(str(err)))
    assert len(outputs) == len(lines)
    assert all(w.filename == __file__ for w in caught)  # the warning names the caller's line
    return Outcome(False, _warned(caught))


def _warned(caught: list[warnings.WarningMessage]) -> dict[int, Expected]:
    ours = [w for w in caught if issubclass(w.category, LanguageWarning)]
    assert len(ours) <= 1
    return listed(str(ours[0].message)) if ours else {}


def via_service(model: Callable[[str], str]) -> Callable[..., Outcome]:
    def run(direction: str, lines: list[str], strict: bool, _: Path, url: Any) -> Outcome:
        import httpx

        body = {"model": model(direction), "text": lines, "strict": strict}
        answer = httpx.post(url + "/v1/translate", json=body, timeout=120)
        if answer.status_code == 422:
            detail = answer.json()["detail"]
            assert '"strict"' in detail
            return Outcome(True, listed(detail))
        assert answer.status_code == 200, answer.text
        reply = answer.json()
        assert len(reply["translations"]) == len(lines)
        flags: dict[int, Expected] = {}
        for entry in reply["warnings"]:
            reason = entry["reason"]
            flags[entry["index"]] = (
                (reason, entry["language"]) if reason == "language" else (reason,)
            )
            assert entry["message"] and (reason != "language") == (entry["language"] is None)
        return Outcome(False, flags)

    return run


def has_ctranslate2() -> bool:
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return False
    return True


ENTRY_POINTS = {
    "gmlm translate": via_cli,
    "gmlm translate under torchrun (one process)": via_sharded,
    "Translator.translate": via_python,
    "service, a checkpoint": via_service(lambda direction: direction),
    "service, its CTranslate2 export": via_service(lambda direction: f"ct2-{direction}"),
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service with both shipped ar1 checkpoints, their CTranslate2 exports (where
    CTranslate2 is installed) and a model that records no languages."""
    from gmlm.serve.backends import load_backend

    exports = {}
    if has_ctranslate2():
        from gmlm.export.ctranslate2 import export_ctranslate2

        root = tmp_path_factory.mktemp("ct2")
        exports = {d: export_ctranslate2(p, root / d) for d, p in CHECKPOINTS.items()}

    def load() -> dict[str, Any]:
        models: dict[str, Any] = {
            d: load_backend(d, str(p), "fp32", 1) for d, p in CHECKPOINTS.items()
        }
        for d, folder in exports.items():
            models[f"ct2-{d}"] = load_backend(f"ct2-{d}", str(folder), "fp32", 1)
        models["unchecked"] = GatedBackend("unchecked")
        return models

    with running(load, ready_timeout=300) as url:
        yield url


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_flags_the_lines_of_the_table(
    entry: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Per direction: the table's lines together are translated with exactly the flags the
    table gives (none for the right language, a 2-word line or a blank one), and refused
    naming the same lines with strict; its unflagged lines alone give no warning, strict or
    not."""
    if entry.startswith("service"):
        if "CTranslate2" in entry and not has_ctranslate2():
            pytest.skip("the optional extra gmlm[ctranslate2] is not installed")
        extra: Any = request.getfixturevalue("service")
    else:
        request.getfixturevalue("fast_load")
        extra = capsys
    run = ENTRY_POINTS[entry]
    for direction in CHECKPOINTS:
        rows = [row for row in TABLE if row.direction == direction]
        lines = [row.line for row in rows]
        want = {i: row.expected for i, row in enumerate(rows) if row.expected is not None}
        assert 0 < len(want) <= SHOWN  # each named in the messages
        for strict in (False, True):
            got = run(direction, lines, strict, tmp_path, extra)
            assert got == Outcome(strict, want), (direction, strict)
            clean = [row.line for row in rows if row.expected is None]
            assert run(direction, clean, strict, tmp_path, extra) == Outcome(False, {})


def test_a_model_without_languages_is_not_checked(
    service: str, text_config, tokenizer, capsys: pytest.CaptureFixture
) -> None:
    """A checkpoint (a Translator) or a served model whose languages are not known: the
    check is skipped, whatever the lines, strict or not; `gmlm translate --help` says so."""
    import httpx

    from gmlm.models import AutoregressiveModel
    from gmlm.translation.translator import Translator

    lines = [GERMAN, "\x00\x00\x00"]
    plain = Translator("ar", AutoregressiveModel(text_config), tokenizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LanguageWarning)
        for mode in ("warn", "strict"):
            assert len(plain.translate(lines, check_language=mode, on_over_length="split")) == 2
    for strict in (False, True):
        body = {"model": "unchecked", "text": lines, "strict": strict}
        answer = httpx.post(service + "/v1/translate", json=body, timeout=60)
        assert answer.status_code == 200 and answer.json()["warnings"] == []
    capsys.readouterr()
    assert exit_status(["translate", "--help"]) == 0
    assert "languages are not known (named on stderr) is not checked" in " ".join(
        capsys.readouterr().out.split()
    )


def test_the_service_counts_flagged_lines_by_model_and_reason(service: str) -> None:
    import httpx

    def counts() -> dict[str, float]:
        text = httpx.get(service + "/metrics").text
        found = re.findall(
            r'^gmlm_flagged_lines_total\{model="en-de",reason="(\w+)"\} (\S+)$', text, re.M
        )
        return {reason: float(value) for reason, value in found}

    before = counts()
    lines = [GERMAN, FRENCH, "\x00", ENGLISH, "?!"]
    for strict in (False, True):  # a refused request's lines are counted too
        httpx.post(
            service + "/v1/translate",
            json={"model": "en-de", "text": lines, "strict": strict},
            timeout=60,
        )
    after = counts()
    assert {r: after.get(r, 0.0) - before.get(r, 0.0) for r in ("language", "no_letters")} == {
        "language": 4.0,
        "no_letters": 4.0,
    }


def test_a_listing_names_a_handful_then_counts_the_rest() -> None:
    flags = [Flag(i, "no_letters", "no letters") for i in range(SHOWN + 3)]
    shown = listing(flags, lambda i: f"line {i + 1}").splitlines()
    assert shown == [f"  line {i + 1}: no letters" for i in range(SHOWN)] + ["  and 3 more"]


def test_the_check_judges_language_only_from_three_words() -> None:
    """A German line of 2 words is not judged against English, of 3 it is; letters alone
    decide a line of any length."""
    two, three = flag_lines(["Zwei Männer"], "en"), flag_lines(["Zwei Männer spielen"], "en")
    assert two == [] and [(f.reason, f.language) for f in three] == [("language", "de")]
    assert [(f.index, f.reason) for f in flag_lines(["\x00", "x", " ", "3.5 %"], "en")] == [
        (0, "no_letters"),
        (3, "no_letters"),
    ]


def test_utf16_read_as_utf8_is_flagged_for_its_control_characters(service: str) -> None:
    """UTF-16 of ASCII letters, decoded as UTF-8, is valid text with a NUL after every letter:
    the shipped German-English model turns it into English-looking words in silence. A file
    never gets here (gmlm.data.textfiles refuses a NUL); the Python API and the service's
    JSON can, and flag it."""
    import httpx

    text = "Ein Hund rennt durch den Schnee."
    line = text.encode("utf-16-le").decode("utf-8")
    assert line.count("\x00") == len(text)
    with pytest.raises(
        LanguageCheckError, match=r"line 1: a control character \(U\+0000\) at character 2"
    ):
        translator("de-en").translate([line, GERMAN], check_language="strict")
    body = {"model": "de-en", "text": [GERMAN, line]}
    answer = httpx.post(service + "/v1/translate", json=body, timeout=60)
    assert [(w["index"], w["reason"]) for w in answer.json()["warnings"]] == [(1, "control")]


def test_the_control_characters_are_those_whitespace_cleaning_leaves() -> None:
    """CONTROL against Unicode's own list: category Cc, less what str.split takes for
    whitespace (and cleaning turns into spaces)."""
    import unicodedata

    from gmlm.translation.language_check import CONTROL

    every = [chr(c) for c in range(0x110000)]
    kept = {c for c in every if unicodedata.category(c) == "Cc" and not c.isspace()}
    assert {c for c in every if CONTROL.fullmatch(c)} == kept


def test_a_bad_check_language_is_an_error_naming_the_choices() -> None:
    with pytest.raises(GmlmError, match="check_language='loud': choose warn, strict or off"):
        translator("en-de").translate([ENGLISH], check_language="loud")


def test_the_identifier_is_not_imported_with_gmlm() -> None:
    """py3langid (and its model) load when a line is first checked, not with `import gmlm`,
    the command line's parsers or the modules of the check. A fresh interpreter."""
    probe = (
        "import sys\n"
        "import gmlm\n"
        "from gmlm.cli.main import build_parser\n"
        "build_parser()\n"
        "import gmlm.translation.language_check, gmlm.serve.language\n"
        "print('py3langid' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.strip() == "False"
