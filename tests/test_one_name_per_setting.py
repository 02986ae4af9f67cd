"""One name for each decoding setting, walked across the three ways in: `gmlm translate`'s
flags, the service's JSON (`options` in a request and in its answer) and the Python API
(`Translator.translate(**overrides)`). A flag is its field's name (`--keep-initial-tokens` is
`keep_initial_tokens`; a switch that turns a True default off is `--no-NAME`), the service
takes and reports exactly those names, and the Python API takes them too. The names an
earlier gmlm used are refused with the new name given."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path

import pytest

from gmlm.cli.main import build_parser
from gmlm.decoding.options import FORMER_NAMES, OPTIONS, decoding_options, parse_variant
from gmlm.errors import GmlmError
from gmlm.serve.backends import command_line_names, options_json
from gmlm.settings import cli_fields, flag_of

pytestmark = pytest.mark.usefixtures("one_thread")


def translate_flags() -> dict[str, str]:
    """dest -> option string of every flag of `gmlm translate`."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    translate = sub.choices["translate"]
    return {
        action.dest: action.option_strings[0]
        for action in translate._actions
        if action.option_strings
    }


@pytest.mark.parametrize("kind", sorted(OPTIONS))
def test_every_flag_is_its_settings_name(kind: str) -> None:
    flags = translate_flags()
    for f in cli_fields(OPTIONS[kind]):
        spelled = f.name.replace("_", "-")
        expected = f"--no-{spelled}" if f.default is True else f"--{spelled}"
        assert flag_of(f) == expected, f"{kind}.{f.name} is spelled {flag_of(f)}"
        assert flags[f.name] == expected, f"gmlm translate spells {f.name} {flags[f.name]}"


@pytest.mark.parametrize("kind", sorted(OPTIONS))
def test_the_service_takes_and_reports_the_flags_names(kind: str, text_config) -> None:
    names = [f.name for f in cli_fields(OPTIONS[kind])]
    assert command_line_names(kind) == names
    options = decoding_options(kind, text_config)
    assert list(options_json(options)) == names


def a_value(cls: type, name: str) -> object:
    """A valid value of field `name` of `cls` other than its default where one is easy."""
    f = next(g for g in dataclasses.fields(cls) if g.name == name)
    tp = typing.get_type_hints(cls)[name]
    if tp is bool:
        return not f.default
    if typing.get_origin(tp) is typing.Literal:
        return next(v for v in typing.get_args(tp) if v != f.default)
    return f.default


def test_the_python_api_and_a_served_request_take_every_name(padir_run: Path) -> None:
    import httpx

    from gmlm.serve.backends import load_backend
    from gmlm.translation.translator import load
    from tests.helpers.serving import running

    cls = OPTIONS["padir"]
    settings = {f.name: a_value(cls, f.name) for f in cli_fields(cls)}
    direct = load(padir_run).translate(["a b c"], **settings)
    with running(lambda: {"padir": load_backend("padir", str(padir_run), "fp32", 1)}) as url:
        answer = httpx.post(
            url + "/v1/translate",
            json={"model": "padir", "text": ["a b c"], "options": settings},
            timeout=30,
        )
        former = httpx.post(
            url + "/v1/translate",
            json={"model": "padir", "text": ["a b c"], "options": {"dedup_final": False}},
            timeout=30,
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["translations"] == direct
    reported = answer.json()["options"]
    assert {name: reported[name] for name in settings} == {
        name: list(v) if isinstance(v, tuple) else v for name, v in settings.items()
    }
    assert former.status_code == 422 and "dedup_final is now dedup" in former.json()["detail"]


@pytest.mark.parametrize("former", sorted(FORMER_NAMES))
def test_a_former_name_is_refused_with_the_new_one(former: str, text_config) -> None:
    new = FORMER_NAMES[former][0]
    with pytest.raises(GmlmError, match=f"{former} is now {new}"):
        decoding_options("padir", text_config, None, {former: False})


def test_a_runs_stored_ablation_variant_reads_as_the_new_setting() -> None:
    assert parse_variant("dedup_final=false") == {"dedup": False}
    assert parse_variant("drop_unchanged_initial=false") == {"keep_initial_tokens": True}
    assert parse_variant("length_weight=0.5") == {"length_score_weight": 0.5}
    with pytest.raises(GmlmError, match="keep_initial_tokens"):
        parse_variant("drop_unchanged_initial=3")
