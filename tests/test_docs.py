"""The documentation is tested like the code: README.md's Layout names every package and
module of src/gmlm (or docs/ARCHITECTURE.md does), every `gmlm` command in README.md's shell
blocks runs here or in the test this file maps it to (a cheap variant where the real one takes
hours), and what README.md says a command prints is what it prints."""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def layout_blocks() -> dict[str, str]:
    """The text of README.md's Layout entry of each folder under src/gmlm/ (its name line and
    every line up to the next entry at its indentation), and under "" the entries of the
    top-level modules."""
    layout = README.split("## Layout", 1)[1].split("```", 2)[1]
    blocks: dict[str, str] = {"": ""}
    stack: list[tuple[int, str]] = []
    for line in layout.split("src/gmlm/\n", 1)[1].split("\n"):
        entry = re.match(r"( *)(\S+)", line)
        if entry is not None and len(entry.group(1)) < 20:  # else a description goes on
            indent, name = len(entry.group(1)), entry.group(2)
            if indent == 0:
                break  # tests/: past src/gmlm
            stack = [(i, folder) for i, folder in stack if i < indent]
            if name.endswith("/"):
                stack.append((indent, (stack[-1][1] if stack else "") + name))
                blocks[stack[-1][1]] = ""
            elif not stack:
                blocks[""] += line + "\n"
        for _, folder in stack:
            blocks[folder] += line + "\n"
    return blocks


def test_every_package_and_module_is_named_in_layout_or_architecture() -> None:
    """A module added to src/gmlm is named in README.md's Layout (in its folder's entry) or
    docs/ARCHITECTURE.md (by its path, e.g. data/corpora.py), and so is every folder."""
    architecture = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    blocks = layout_blocks()
    src = ROOT / "src" / "gmlm"
    missing = []
    for folder in sorted(p for p in src.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        name = folder.relative_to(src).as_posix() + "/"
        parent = name[: name.rstrip("/").rfind("/") + 1]
        if name not in blocks and name[len(parent) :] not in blocks.get(parent, ""):
            missing.append(name)
    for module in sorted(src.rglob("*.py")):
        path = module.relative_to(src).as_posix()
        folder = module.parent.relative_to(src).as_posix() + "/" if "/" in path else ""
        if module.name.startswith("__") and folder:
            continue  # a package's __init__ is its folder's entry
        block = blocks.get(folder, "")
        if path in architecture or re.search(rf"(?<![\w/]){module.stem}\b", block):
            continue
        missing.append(path)
    assert missing == []


def readme_shell_commands() -> list[str]:
    """Each `gmlm ...` command of README.md's bash blocks as written (lines joined at a trailing
    backslash, the comment and what comes before a pipe dropped, spaces collapsed)."""
    blocks = re.findall(r"^```bash\n(.*?)^```\n", README, flags=re.S | re.M)
    commands = []
    for line in (line for block in blocks for line in block.replace("\\\n", " ").split("\n")):
        code = re.sub(r"(^|\s)#.*", "", line)
        match = re.search(r"(?<![\w.\[/-])gmlm\s.*", code)
        if match:
            commands.append(" ".join(match.group(0).split()))
    return commands


# How each README command runs in a test: a test of this file (a cheap variant of it), or
# "PATH::TEST", a test elsewhere that runs its cheap variant. A command added to the README
# without a line here fails test_every_readme_command_runs_in_a_test.
PADIR, AR = "checkpoints/multi30k-de-en/padir", "checkpoints/multi30k-de-en/ar"
FIVE = "test_the_five_commands_run_on_tiny_data"
COVERED = {
    f"gmlm translate --checkpoint {PADIR}": "test_the_readme_translates_as_it_says",
    f"gmlm translate --checkpoint {AR} --beam 5": "test_the_readme_translates_as_it_says",
    "gmlm translate --checkpoint checkpoints/multi30k-en-de/padir": (
        "test_the_readme_translates_as_it_says"
    ),
    "gmlm data prepare --corpus multi30k:../shared/data/multi30k --out runs/data/multi30k": FIVE,
    "gmlm train --config small-ar data=runs/data/multi30k out=runs/teacher": FIVE,
    "gmlm distill --teacher runs/teacher --data runs/data/multi30k --out runs/data/distilled": FIVE,
    "gmlm train --config small-padir data=runs/data/distilled out=runs/padir": FIVE,
    "gmlm translate --checkpoint runs/padir --steps 4 --length-beam 5 < de.txt > en.txt": FIVE,
    f"gmlm bench --ar {AR} --padir {PADIR} --data runs/demo/data --sentences 100": (
        "tests/bench/test_bench.py::cli_run"
    ),
    "gmlm serve &": (
        "tests/serve/test_serve.py::test_sigterm_under_load_answers_every_accepted_request"
    ),
    "gmlm loadtest --rates 1,2,4,8 --duration 20 --plot load.png": (
        "tests/serve/test_loadtest.py::test_cli_starts_its_own_service_and_writes_every_output"
    ),
    "gmlm theory verify": "test_the_readme_theory_verify_commands_run",
    "gmlm theory verify --max-n 12": "test_the_readme_theory_verify_commands_run",
    "gmlm theory verify --couplings 0.1,1.5 --fields 0.3": (
        "test_the_readme_theory_verify_commands_run"
    ),
    "gmlm theory figure1 / figure2": (
        "tests/theory/test_figures.py::test_estimation_figure_values_match_brute_force"
    ),
    "gmlm theory figure3": (
        "tests/theory/test_figures.py::test_hitting_figure_values_match_brute_force"
    ),
    "gmlm theory poincare --n 22 --k 1": (
        "tests/theory/test_spectral_gap.py::test_poincare_command_prints_time_and_memory"
    ),
    "gmlm theory bench": "tests/theory/test_spectral_gap.py::test_bench_end_to_end",  # slow tier
}


def test_every_readme_command_runs_in_a_test() -> None:
    """COVERED maps every README command, and only those, to a test that exists and runs
    that command (a test elsewhere names its subcommand; this file's read the README)."""
    commands = readme_shell_commands()
    assert sorted(set(commands)) == sorted(COVERED)
    for command, test in COVERED.items():
        path, _, name = test.rpartition("::")
        source = (ROOT / (path or "tests/test_docs.py")).read_text(encoding="utf-8")
        lines = source.split("\n")
        defined = [  # the test with its decorators (a parametrize may name the command)
            "\n".join(
                lines[min(d.lineno for d in [node, *node.decorator_list]) - 1 : node.end_lineno]
            )
            for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef) and node.name == name
        ]
        assert defined, f"{command}: {test} does not exist"
        names = re.match(r"gmlm((?: [a-z0-9]+)+)", command)
        assert names is not None
        if path:  # this file's tests run the README's own lines
            assert f'"{names.group(1).split()[-1]}"' in defined[0], f"{test} skips {command}"


def test_the_readme_translates_as_it_says(tmp_path: Path) -> None:
    """Each `echo "SOURCE" | gmlm translate ...` of the README, followed by `# -> OUTPUT`,
    prints OUTPUT with the shipped checkpoints."""
    from gmlm.cli.main import main

    shown = re.findall(r'^echo "(.+)" \| gmlm translate (.+)\n# -> (.+?)\s*$', README, re.M)
    assert len(shown) >= 3  # both directions
    for number, (source, flags, expected) in enumerate(shown):
        source_file, output = tmp_path / f"{number}.src", tmp_path / f"{number}.tgt"
        source_file.write_text(source + "\n", encoding="utf-8")
        argv = ["translate", *flags.split(), "--input", str(source_file), "--output", str(output)]
        assert main([*argv, "--device", "cpu"]) == 0
        assert output.read_text(encoding="utf-8") == expected + "\n", flags


def test_the_five_commands_run_on_tiny_data(tmp_path: Path, monkeypatch) -> None:
    """README's "Translation in five commands", each command as written but on a tiny
    Multi30k-shaped corpus, with the tiny presets for a few steps."""
    from gmlm.cli.main import main
    from tests.helpers.corpora import make_pairs, write_lines

    monkeypatch.chdir(tmp_path)
    multi30k = tmp_path / "multi30k"
    multi30k.mkdir()
    for split, count, seed in (("train", 150, 1), ("val", 20, 2), ("test_2016_flickr", 20, 3)):
        src, tgt = make_pairs(count, seed=seed)
        write_lines(multi30k / f"{split}.de", src)
        write_lines(multi30k / f"{split}.en", tgt)
    write_lines(tmp_path / "de.txt", make_pairs(5, seed=4)[0])
    five = README.split("## Translation in five commands", 1)[1].split("```bash\n", 1)[1]
    commands = five.split("```", 1)[0].strip().split("\n")
    assert [c.split()[1] for c in commands] == ["data", "train", "distill", "train", "translate"]
    tiny = ["max_steps=10", "valid_every=10", "valid_sentences=0", "threads=1", "precision=fp32"]
    for command in commands:
        words = command.replace("../shared/data/multi30k", str(multi30k)).split()[1:]
        if words[0] == "data":
            words += ["--vocab-size", "400", "--threads", "1", "--no-progress"]
        elif words[0] == "train":
            words = [w.replace("small-", "tiny-") for w in words] + [*tiny, "--no-progress"]
        elif words[0] == "distill":
            words += ["--no-progress", "--device", "cpu"]
        else:
            assert words[-4:] == ["<", "de.txt", ">", "en.txt"]
            words = [*words[:-4], "--input", "de.txt", "--output", "en.txt", "--device", "cpu"]
        assert main(words) == 0, command
    assert len((tmp_path / "en.txt").read_text(encoding="utf-8").splitlines()) == 5


def test_the_readme_theory_verify_commands_run(tmp_path: Path) -> None:
    """README's `gmlm theory verify` lines, on the grid up to N = 3 (--max-n 3)."""
    from gmlm.cli.main import main

    lines = [c for c in readme_shell_commands() if c.startswith("gmlm theory verify")]
    assert len(lines) == 3
    for number, line in enumerate(lines):
        words = re.sub(r"--max-n \d+", "", line).split()[1:]
        out = tmp_path / str(number)
        assert main([*words, "--max-n", "3", "--json", "--out", str(out)]) == 0, line
        assert (out / "verify.json").is_file()


def test_the_readme_names_every_command_that_does_not_pick_the_gpu() -> None:
    """README says every command picks the GPU automatically: the sentence names each whose
    --device default is not `auto` (bench and serve run on the CPU unless told)."""
    from gmlm.cli.main import build_parser

    def commands(parser: argparse.ArgumentParser, names: str) -> Iterator[tuple[str, Any]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from commands(child, f"{names} {name}".strip())
            yield names, action

    sentence = re.search(r"every command picks the GPU automatically[^.]*\.", README, re.S)
    assert sentence is not None
    text = " ".join(sentence.group(0).split())
    not_auto = [
        names
        for names, action in commands(build_parser(), "")
        if "--device" in action.option_strings and action.default != "auto"
    ]
    assert sorted(not_auto) == ["bench", "serve"]
    assert [n for n in not_auto if f"`gmlm {n}`" not in text] == []
