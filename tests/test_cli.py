import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gmlm.cli.main import build_parser, main

SRC = Path(__file__).resolve().parents[1] / "src"


def test_help_lists_commands(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    assert "theory" in out and "reproduce" in out


def test_python_dash_m_works():
    result = subprocess.run(
        [sys.executable, "-m", "gmlm", "--version"], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("gmlm ")


def test_a_closed_stdout_pipe_ends_quietly(tmp_path):
    # `gmlm evaluate ... | head -1`: the reader may be gone before gmlm writes. The read end
    # is closed before gmlm starts, so its first write always meets a broken pipe.
    lines = "".join(f"a dog runs in the park {i}\n" for i in range(50))
    (tmp_path / "hyp.en").write_text(lines)
    (tmp_path / "ref.en").write_text(lines)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "gmlm", "evaluate", "--hyp", "hyp.en", "--ref", "ref.en"],
            cwd=tmp_path,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(SRC)},
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert result.stderr == ""  # no traceback, no "Exception ignored" at exit
    assert result.returncode == 141  # as if killed by SIGPIPE, like other Unix tools


@pytest.mark.parametrize(
    "argv",
    [
        ["reproduce", "--preset", "smoke", "--out", "{file}"],
        ["theory", "figure1", "--out", "{file}"],
        ["theory", "figure3", "--out", "{file}/sub"],
        ["theory", "verify", "--out", "{file}"],
    ],
    ids=["reproduce", "figure1", "figure3-below-a-file", "verify"],
)
def test_an_output_folder_that_is_a_file_is_a_clean_error(argv, tmp_path, capsys):
    file = tmp_path / "taken"
    file.write_text("mine\n")
    assert main([arg.format(file=file) for arg in argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.endswith(f": {file} is a file, not a folder; choose another path\n")
    assert captured.err.startswith("gmlm: error: --out ") and captured.err.count("\n") == 1
    assert file.read_text() == "mine\n"


@pytest.mark.parametrize("value", ["nan", ".inf", "-1e999"])
def test_non_finite_float_settings_are_clean_errors(value, capsys):
    assert main(["train", "--config", "tiny-ar", f"optim.lr={value}", "data=x", "out=y"]) == 2
    assert "gmlm: error: optim.lr=" in capsys.readouterr().err


def subcommand(*names):
    """The parser of `gmlm NAME [SUBNAME]`."""
    parser = build_parser()
    for name in names:
        (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


CKPT = ["--checkpoint", "c"]
DATA = ["--data", "d"]


@pytest.mark.parametrize(
    ("argv", "old", "dest", "value"),
    [
        (["translate", *CKPT], ["--bf16"], "precision", "bf16"),
        (["analyze", "length", *CKPT, *DATA], ["--bf16"], "precision", "bf16"),
        (["analyze", "attention", *CKPT, *DATA], ["--out", "r.json"], "output", Path("r.json")),
        (["bench", "--ar", "a", "--padir", "p", *DATA], ["--json-out", "b.json"], "output",
         Path("b.json")),
        (["export", *CKPT, "--out", "o"], ["--dtype", "fp32"], "precision", "fp32"),
        (["distill", "--teacher", "t", *DATA, "--out", "o"], ["--fp32"], "precision", "fp32"),
    ],
    ids=["translate-bf16", "analyze-bf16", "analyze-out", "bench-json-out", "export-dtype",
         "distill-fp32"],
)  # fmt: skip
def test_old_spellings_still_work_with_a_warning_and_hidden_from_help(
    argv, old, dest, value, capsys
):
    args = build_parser().parse_args([*argv, *old])
    assert getattr(args, dest) == value
    new = {"precision": "--precision", "output": "--output"}[dest]
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"gmlm: warning: {old[0]} is deprecated and will be removed; use {new} {value}"
    help_text = subcommand(*[n for n in argv[:2] if not n.startswith("-")]).format_help()
    assert re.search(re.escape(old[0]) + r"(?![\w-])", help_text) is None
    assert build_parser().parse_args([*argv, new, str(value)]) == args  # the same as the new


def test_every_precision_flag_offers_the_same_choices():
    """translate and bench offer every decoding precision; export (a stored weight type),
    analyze and distill the floating-point ones (distill also auto), from the same
    constants."""
    from gmlm.decoding.options import FLOAT_PRECISIONS, PRECISIONS

    assert PRECISIONS == ("fp32", "bf16", "int8") and FLOAT_PRECISIONS == ("fp32", "bf16")
    commands = {
        ("translate",): PRECISIONS,
        ("analyze", "attention"): FLOAT_PRECISIONS,
        ("analyze", "length"): FLOAT_PRECISIONS,
        ("distill",): ("auto", *FLOAT_PRECISIONS),  # auto: bf16 on GPUs that have it
        ("export",): FLOAT_PRECISIONS,
    }
    for names, choices in commands.items():
        shown = [a for a in subcommand(*names)._actions if a.help != argparse.SUPPRESS]
        (action,) = (a for a in shown if a.dest == "precision")
        assert tuple(action.choices) == choices, names
    from gmlm.bench.settings import BenchSettings
    from gmlm.cli.options import settings_from_args

    args = build_parser().parse_args(["bench", "--ar", "a", "--padir", "p", *DATA])
    assert settings_from_args(BenchSettings, args).precisions == PRECISIONS
    args = build_parser().parse_args(["bench", "--precision", "int8,fp32", *DATA])
    assert settings_from_args(BenchSettings, args).precisions == ("int8", "fp32")


def test_output_flags_follow_the_vocabulary():
    """--out names a folder to write and --output a file, in every command."""
    theory = {("theory", name) for name in ("verify", "figure1", "figure2", "figure3", "bench")}
    folders = {
        ("data", "prepare"),
        ("distill",),
        ("export",),
        ("average",),
        ("reproduce",),
        *theory,
    }
    analyses = {
        ("analyze", name)
        for name in ("attention", "length", "ablation", "compare", "calibrate", "table1")
    }
    files = {("translate",), ("bench",), ("loadtest",), *analyses}
    seen = {}
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        inner = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        leaves = inner[0].choices.items() if inner else [(None, command)]
        for subname, leaf in leaves:
            key = (name,) if subname is None else (name, subname)
            shown = {
                o for a in leaf._actions if a.help != argparse.SUPPRESS for o in a.option_strings
            }
            seen[key] = shown & {"--out", "--output", "--json-out"}
    assert {k for k, v in seen.items() if v == {"--out"}} == folders
    assert {k for k, v in seen.items() if v == {"--output"}} == files
    assert all(len(v) <= 1 for v in seen.values())


def test_shared_list_parsers():
    from gmlm.cli.flags import choice_list, comma_list, number
    from gmlm.config import Range
    from gmlm.decoding.options import PRECISIONS

    ints = comma_list(number(int, Range(ge=1)), "integers", "1,8,64")
    floats = comma_list(number(float, Range(ge=0, lt=1)), "numbers", "0,0.5")
    assert ints("1, 8,,64") == (1, 8, 64) and floats("0,.5") == (0.0, 0.5)
    precision_list = choice_list(PRECISIONS)
    assert precision_list("bf16,fp32") == ("bf16", "fp32")
    for parse, text, message in (
        (ints, "1,x", "'1,x': expected comma-separated integers, e.g. 1,8,64"),
        (ints, ",", "',': expected comma-separated integers"),
        (ints, "4,0", "0 must be >= 1"),
        (floats, "a", "'a': expected comma-separated numbers, e.g. 0,0.5"),
        (floats, "0.5,1", "1 must be in [0, 1)"),
        (floats, "0.5,nan", "nan: expected a finite number, not NaN or infinity"),
        (precision_list, "fp16", "'fp16': choose from fp32, bf16, int8"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
            parse(text)


DOCS = (
    "README.md",
    "docs/DESIGN.md",
    "docs/ARCHITECTURE.md",
    "docs/translation.md",
    "docs/serving.md",
    "docs/training.md",
    "docs/theory.md",
    "docs/RESULTS.md",
    "docs/GPU.md",
)


def doc_commands(doc: str = "README.md") -> list[list[str]]:
    """The words after `gmlm` of every command `doc` shows: in its bash blocks (lines joined at
    a trailing backslash, comments dropped) and its inline code spans (line breaks as spaces),
    each cut at a shell operator; `gmlm theory verify|figure1 ...` is one command per name."""
    text = (Path(__file__).resolve().parents[1] / doc).read_text(encoding="utf-8")
    bash = re.compile(r"^```bash\n(.*?)^```\n", flags=re.S | re.M)
    lines = [
        line for block in bash.findall(text) for line in block.replace("\\\n", " ").split("\n")
    ]
    # Plain fences' spans count (README's Layout); other languages' blocks (nginx) are not
    # shell: dropped.
    rest = re.sub(r"^[ \t]*```[a-z]+\n.*?^[ \t]*```\n", "", bash.sub("", text), flags=re.S | re.M)
    rest = re.sub(r"^[ \t]*```.*$", "", rest, flags=re.M)
    lines += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", rest)]
    found = []
    for line in lines:
        code = re.sub(r"(^|\s)#.*", "", line)  # a shell comment is prose
        for match in re.finditer(r"(?<![\w.\[/-])gmlm[ \t]+(\S.*)", code):
            words = re.split(r"\s(?:[|;<>&]|&&)\s", match.group(1))[0].split()
            found += expand_alternatives(words)
    return found


def expand_alternatives(words: list[str]) -> list[list[str]]:
    """`theory verify|figure1 --json` -> `theory verify --json`, `theory figure1 --json`: a
    command word of names joined by | (a flag's value, e.g. `--preset smoke|demo`, stays)."""
    for i, word in enumerate(words):
        if word.startswith("-"):
            break
        if "|" in word:
            return [
                command
                for name in word.split("|")
                for command in expand_alternatives([*words[:i], name, *words[i + 1 :]])
            ]
    return [words]


@pytest.mark.parametrize("doc", DOCS)
def test_every_flag_the_docs_name_is_in_its_commands_help(doc: str) -> None:
    """README.md and the guides name only commands that exist and flags that their command's
    --help shows (no misspelt, removed or deprecated flag)."""
    commands = doc_commands(doc)
    assert len(commands) >= {"docs/theory.md": 2, "docs/GPU.md": 1}.get(doc, 5)
    wrong = []
    for words in commands:
        parser, names = build_parser(), ["gmlm"]
        while words and (
            sub := [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        ):
            if words[0] not in sub[0].choices:
                break
            names.append(words[0])
            parser = sub[0].choices[words.pop(0)]
        if sub and words and not words[0].startswith("-"):
            wrong.append(f"{' '.join(names)} {words[0]}: no such command")
        shown = {
            o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings
        }
        flags = (word.strip("[](),").split("=")[0] for word in words)
        wrong += [
            f"{' '.join(names)} {flag}"
            for flag in flags
            if flag.startswith("--") and flag not in shown
        ]
    assert wrong == []


def leaf_parsers(parser=None, names=()):
    """(names, parser) of every command and subcommand that takes flags of its own."""
    parser = parser or build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield names, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from leaf_parsers(child, (*names, name))


def test_every_numeric_flag_checks_a_declared_range():
    """A number on the command line is read by gmlm.cli.flags.number, which checks the range
    declared with the setting as it parses: never by a bare int or float."""
    from gmlm.cli.flags import number

    bare, ranged = [], 0
    for names, parser in leaf_parsers():
        for action in parser._actions:
            item = action.type
            if not isinstance(item, number):  # a comma-separated list: its items'
                item = getattr(item, "item", item)
            if item in (int, float):
                bare.append(f"gmlm {' '.join(names)} {'/'.join(action.option_strings)}")
            ranged += isinstance(item, number)
    assert bare == []
    assert ranged > 60  # the walk sees the flags


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["throughput", "--steps", "-2"], "argument --steps: -2 must be between 1 and 100000"),
        (["throughput", "--steps", "0"], "argument --steps: 0 must be between 1 and 100000"),
        (["throughput", "--warmup", "-1"], "argument --warmup: -1 must be between 0 and 100000"),
        (
            ["analyze", "calibrate", *CKPT, *DATA, "--min-gain", "nan"],
            "argument --min-gain: nan: expected a finite number",
        ),
        (
            ["analyze", "calibrate", *CKPT, *DATA, "--min-gain", "-1"],
            "argument --min-gain: -1 must be between 0 and 100 (BLEU points)",
        ),
        (["theory", "poincare", "--n", "1000000000"], "argument --n: 1000000000 must be between"),
        (["theory", "poincare", "--k", "0"], "argument --k: 0 must be between 1 and 24"),
        (["theory", "figure1", "--sizes", "100000000000"], "100000000000 must be between 1 and"),
        (["theory", "figure3", "--reps", "0"], "argument --reps: 0 must be between 1 and 100000"),
        (["theory", "verify", "--tol", "inf"], "argument --tol: inf: expected a finite number"),
        (["bench", "--ar", "a", "--padir", "p", *DATA, "--warmup", "-5"], "-5 must be between 0"),
        (["bench", "--ar", "a", "--padir", "p", *DATA, "--steps", "1,0"], "0 must be between 1"),
        (["data", "bench", "d", "--epochs", "0"], "argument --epochs: 0 must be between 1"),
        (["data", "prepare", "--out", "o", "--vocab-size", "-4"], "-4 must be between 1 and"),
        (["distill", "--teacher", "t", *DATA, "--out", "o", "--beam", "0"], "0 must be between"),
        (["translate", *CKPT, "--beam", "100000"], "100000 must be between 1 and 1000"),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, list) else None,
)
def test_out_of_range_flags_are_refused_as_they_are_parsed(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err.splitlines()[-1] and "Traceback" not in err


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["threads=-1"], "threads=-1 must be between 0 and 4096 (0: the default)"),
        (["max_tokens=0"], "max_tokens=0 must be between 1 and 16777216"),
        (["model.d_model=1000000000"], "model.d_model=1000000000 must be between 1 and 65536"),
        (["optim.lr=-1"], "optim.lr=-1 must be > 0"),
        (["padir.keep_rate=1.5"], "padir.keep_rate=1.5 must be between 0 and 1"),
        (["optim.betas=[0.9, 1.5]"], "optim.betas[1]=1.5 must be in [0, 1)"),
    ],
)
def test_out_of_range_training_settings_are_clean_errors(overrides, message, capsys):
    assert main(["train", "--config", "tiny-ar", *overrides, "data=x", "out=y"]) == 2
    assert capsys.readouterr().err == f"gmlm: error: {message}\n"


def test_out_of_range_reproduce_settings_are_clean_errors(tmp_path, capsys):
    argv = ["reproduce", "--preset", "smoke", "--out", str(tmp_path / "run")]
    assert main([*argv, "evaluate.ar_beams=[1, 100000]"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "gmlm: error: evaluate.ar_beams[1]=100000 must be between 1 and 1000 (1 is "
        "greedy search)\n"
    )
    assert not (tmp_path / "run").exists()
