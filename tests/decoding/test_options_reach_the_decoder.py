"""Every decoding setting and precision arrives where it acts.

Each field of SearchOptions and RefinementOptions, given to `Translator.translate` (Python) or
as its `gmlm translate` flag, is what the decoder receives, and changes the output where it
should; `--precision bf16` and `int8` translate as the bf16 and int8 copies of the model do,
not as fp32. The cases are keyed by field, and the fields are read from the dataclasses: a
new setting without a case here fails `test_every_setting_has_a_case`.

The models are untrained (tests/helpers/checkpoints.py): their near-uniform scores make almost
any change of a setting change some output, where a trained model's would often stay put. An
untrained AR model never ends a hypothesis before its length limit, though, so the settings
that act on hypotheses that end (the minimum length, the length penalty) are tried on the AR
model that has learned its first test pairs (tests/helpers/learned.py), on pairs it has not
seen. Every case translates the same 12 unseen test sentences of `word_task_data`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import gmlm
from gmlm.cli.main import main
from gmlm.data.binarized import load_dataset
from gmlm.decoding.options import OPTIONS, PRECISIONS
from gmlm.settings import cli_fields, flag_of
from gmlm.translation import translator as translator_module
from gmlm.translation.precision import at_precision
from gmlm.translation.translator import Translator
from tests.helpers.checkpoints import write_checkpoint
from tests.helpers.learned import PAIRS


@dataclasses.dataclass(frozen=True)
class Case:
    """A setting's test: `value` (not its default) against the default, both under `base`
    (the settings under which the field acts at all, e.g. a beam for the length penalty);
    `changes`: whether the output changes (False: the setting changes the cost or the extra
    results of an analysis, never the text); `learned`: on the learned model, not the
    untrained one; `in_ids`: the change is looked for in the decoder's output ids rather
    than in the text."""

    value: Any
    base: dict[str, Any] = dataclasses.field(default_factory=dict)
    changes: bool = True
    learned: bool = False
    in_ids: bool = False


CASES: dict[str, dict[str, Case]] = {
    "ar": {
        "beam": Case(4),
        "length_penalty": Case(5.0, {"beam": 4}, learned=True),
        "max_len_a": Case(0.5),
        "max_len_b": Case(3),
        "min_length": Case(20, learned=True),
        "max_length": Case(4),
    },
    "padir": {
        "steps": Case(1),
        "length_beam": Case(1),
        "length_offsets": Case((-1, 1)),
        "length_shift": Case(2),
        "random_starts": Case(3),
        "init": Case("mask"),
        "early_stop": Case(False, changes=False),
        "stutter_remask": Case("none"),
        "stutter_ngram": Case(1, {"stutter_remask": "none"}),  # more repeats, then 2-4-grams kept
        # The untrained model's tokens left at their random start are byte pieces that spell
        # no whole character, which the text drops (Tokenizer.decode): the ids show it.
        "keep_initial_tokens": Case(True, in_ids=True),
        "dedup": Case(False, {"stutter_remask": "none"}),  # more repeats to keep
        # Acts on the text after decoding, where a repeat hides from the tokens; these models'
        # outputs show none (tests/translation/test_word_repeats.py forces one).
        "dedup_words": Case(False, changes=False),
        "selection": Case("sum"),
        "length_penalty": Case(1.0),
        "length_score_weight": Case(1.0),
        "remask": Case("linear"),
        "remask_ratio": Case(0.6, {"remask": "constant"}),
        "prune_after": Case(0),
        "prune_keep": Case((1,)),
        # The passes run as groups of similar length instead of one: the cost, not the text
        # (tests/decoding/test_refinement.py checks the groups and the equal outputs).
        "split_overhead": Case(10**6, changes=False),
        "return_steps": Case(True, changes=False),
        "return_attention": Case(True, changes=False),
    },
}
FIELDS = [(kind, f.name) for kind, cls in OPTIONS.items() for f in dataclasses.fields(cls)]
CLI_FIELDS = [(kind, f.name) for kind, cls in OPTIONS.items() for f in cli_fields(cls)]


def ids(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{kind}-{name}" for kind, name in pairs]


@dataclasses.dataclass(frozen=True)
class Subject:
    """A checkpoint folder, its translator and the sentences the cases translate."""

    folder: Path
    translator: Translator
    lines: list[str]


@pytest.fixture(scope="module")
def subjects(
    word_task_data: Path,
    learned_checkpoints: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[str, bool], Subject]:
    """(kind, learned) -> the untrained or the learned checkpoint of `kind`."""
    data = load_dataset(word_task_data)
    lines = data.read_text("test", "src")[PAIRS : PAIRS + 12]
    root = tmp_path_factory.mktemp("options")
    found = {}
    for kind in ("ar", "padir"):
        folders = {
            False: write_checkpoint(root / kind, kind, data.tokenizer),
            True: learned_checkpoints[kind],
        }
        for learned, folder in folders.items():
            found[kind, learned] = Subject(folder, gmlm.load(folder, device="cpu"), lines)
    return found


@dataclasses.dataclass(frozen=True)
class Call:
    """A call of a decoder: the model and options it received, and the scores of what it
    returned (each sentence's best hypothesis, or its n-best list's)."""

    model: Any
    options: Any
    scores: list[Any]
    tokens: list[Any]


@pytest.fixture
def received(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """Every call of the decoders `Translator` runs, in order."""
    calls: list[Call] = []
    for name in ("refine", "greedy_search", "beam_search"):
        original = getattr(translator_module, name)

        def spy(
            model: Any, src: Any, options: Any, *rest: Any, _original: Any = original, **kw: Any
        ) -> Any:
            results = _original(model, src, options, *rest, **kw)
            scores = [[h.score for h in r] if isinstance(r, list) else r.score for r in results]
            tokens = [[h.tokens for h in r] if isinstance(r, list) else r.tokens for r in results]
            calls.append(Call(model, options, scores, tokens))
            return results

        monkeypatch.setattr(translator_module, name, spy)
    return calls


def options_of(calls: list[Call]) -> set[Any]:
    return {call.options for call in calls}


def scores_of(calls: list[Call]) -> list[Any]:
    return [score for call in calls for score in call.scores]


def test_every_setting_has_a_case() -> None:
    assert {(kind, name) for kind, cases in CASES.items() for name in cases} == set(FIELDS), (
        "each decoding setting needs a Case in CASES (tests/decoding/"
        "test_options_reach_the_decoder.py): a value, and whether it changes the output"
    )


def flag_args(kind: str, settings: dict[str, Any]) -> list[str]:
    """`gmlm translate` arguments giving `settings` (field name -> value)."""
    fields = {f.name: f for f in cli_fields(OPTIONS[kind])}
    args = []
    for name, value in settings.items():
        flag = flag_of(fields[name])
        if isinstance(value, bool):
            assert value != fields[name].default  # a switch sets the opposite of the default
            args.append(flag)
        elif isinstance(value, tuple):
            args.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            args += [flag, str(value)]
    return args


def translate_cli(subject: Subject, tmp_path: Path, *args: str) -> list[str]:
    source, output = tmp_path / "in.de", tmp_path / "out.en"
    source.write_text("".join(line + "\n" for line in subject.lines), encoding="utf-8")
    command = ["translate", "--checkpoint", str(subject.folder), "--input", str(source)]
    assert main([*command, "--output", str(output), "--device", "cpu", *args]) == 0
    return output.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(("kind", "name"), FIELDS, ids=ids(FIELDS))
def test_a_setting_reaches_the_decoder(
    kind: str,
    name: str,
    subjects: dict[tuple[str, bool], Subject],
    received: list[Call],
    tmp_path: Path,
) -> None:
    """Given to `translate` (and as its flag, where it has one), the setting is what the
    decoder receives, every other setting at its default; the output changes as it should."""
    case = CASES[kind][name]
    subject = subjects[kind, case.learned]
    cls = OPTIONS[kind]
    assert case.value != getattr(cls(), name), "a case's value must not be the default"
    settings = {**case.base, name: case.value}
    given = subject.translator.translate(subject.lines, **settings)
    assert options_of(received) == {cls(**settings)}
    given_ids = [call.tokens for call in received]
    received.clear()
    default = subject.translator.translate(subject.lines, **case.base)
    assert options_of(received) == {cls(**case.base)}
    if case.in_ids:
        assert (given_ids != [call.tokens for call in received]) == case.changes
    else:
        assert (given != default) == case.changes, (given, default)
    if (kind, name) in CLI_FIELDS:
        received.clear()
        assert translate_cli(subject, tmp_path, *flag_args(kind, settings)) == given
        assert options_of(received) == {cls(**settings)}


@pytest.mark.parametrize("kind", ["ar", "padir"])
@pytest.mark.parametrize("precision", [p for p in PRECISIONS if p != "fp32"])
def test_a_precision_translates_as_the_model_at_that_precision(
    kind: str,
    precision: str,
    subjects: dict[tuple[str, bool], Subject],
    received: list[Call],
    tmp_path: Path,
) -> None:
    """Python and `gmlm translate --precision`: the output of the converted copy of the
    model (decoded as an fp32 model is), scores included, which differ from the fp32 model's
    (its texts may not: rounding moves an argmax only at a near-tie)."""
    subject = subjects[kind, False]
    translator, lines = subject.translator, subject.lines
    converted = at_precision(translator.model, precision)  # type: ignore[arg-type]
    expected = Translator(translator.kind, converted, translator.tokenizer).translate(lines)
    expected_scores = scores_of(received)
    received.clear()
    translator.translate(lines)
    assert scores_of(received) != expected_scores  # the test can tell the precisions apart
    received.clear()
    assert translator.translate(lines, precision=precision) == expected  # type: ignore[arg-type]
    assert scores_of(received) == expected_scores
    assert {id(call.model) for call in received} == {id(translator.model_at(precision))}  # type: ignore[arg-type]
    received.clear()
    assert translate_cli(subject, tmp_path, "--precision", precision) == expected
    assert scores_of(received) == expected_scores
