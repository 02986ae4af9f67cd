"""The documentation is tested like the code: docs/ARCHITECTURE.md's Layout names every package
and module of src/gmlm, every `gmlm` command in the shell blocks of README.md and the guides
runs here or in the test this file maps it to (a cheap variant where the real one takes
hours), what README.md says a command prints is what it prints, and docs/serving.md's schema
is what tools/openapi_doc.py generates."""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
ARCHITECTURE = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
# The documents whose shell blocks' `gmlm` commands each run in a test (COVERED).
DOCS = ("README.md", "docs/translation.md", "docs/serving.md", "docs/training.md", "docs/theory.md")


def read(doc: str) -> str:
    return (ROOT / doc).read_text(encoding="utf-8")


def layout_blocks() -> dict[str, str]:
    """The text of docs/ARCHITECTURE.md's Layout entry of each folder under src/gmlm/ (its name
    line and every line up to the next entry at its indentation), and under "" the entries of
    the top-level modules."""
    layout = ARCHITECTURE.split("## Layout", 1)[1].split("```", 2)[1]
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


def test_every_package_and_module_is_named_in_architecture() -> None:
    """A module added to src/gmlm is named in docs/ARCHITECTURE.md's Layout (in its folder's
    entry) or elsewhere on that page by its path (e.g. data/corpora.py), and so is every
    folder."""
    architecture = ARCHITECTURE
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


def shell_commands(doc: str = "README.md") -> list[str]:
    """Each `gmlm ...` command of `doc`'s bash blocks as written (lines joined at a trailing
    backslash, the comment and what comes before a pipe dropped, spaces collapsed)."""
    blocks = re.findall(r"^```bash\n(.*?)^```\n", read(doc), flags=re.S | re.M)
    commands = []
    for line in (line for block in blocks for line in block.replace("\\\n", " ").split("\n")):
        code = re.sub(r"(^|\s)#.*", "", line)
        match = re.search(r"(?<![\w.\[/-])gmlm\s.*", code)
        if match:
            commands.append(" ".join(match.group(0).split()))
    return commands


# How each command of DOCS runs in a test, by document: a test of this file (a cheap variant of
# it), or "PATH::TEST", a test elsewhere that runs its cheap variant. A command added to a
# document without a line here fails test_every_documented_command_runs_in_a_test.
PADIR, AR = "checkpoints/multi30k-de-en/padir", "checkpoints/multi30k-de-en/ar"
FIVE = "test_the_five_commands_run_on_tiny_data"
FILES = "test_the_docs_translate_files_as_shown"
SERVE = "tests/serve/test_serve.py::test_sigterm_under_load_answers_every_accepted_request"
LOADTEST = "tests/serve/test_loadtest.py::test_cli_starts_its_own_service_and_writes_every_output"
THEORY = "test_the_theory_verify_commands_run"
SHOWN = "test_the_readme_translates_as_it_says"
COVERED = {
    "README.md": {
        f"gmlm translate --checkpoint {PADIR}": SHOWN,
        f"gmlm translate --checkpoint {AR} --beam 5": SHOWN,
        "gmlm translate --checkpoint checkpoints/multi30k-en-de/padir": SHOWN,
        f"gmlm translate --checkpoint {PADIR} --input de.txt --output en.txt": FILES,
        "gmlm serve &": SERVE,
    },
    "docs/translation.md": {
        f"gmlm translate --checkpoint {PADIR} --input de.txt --output en.txt": FILES,
        f"gmlm translate --checkpoint {AR} --beam 5 --input de.txt --output en.txt": FILES,
        f"gmlm translate --checkpoint {PADIR} --steps 10 --strict --input de.txt --output en.txt": (
            FILES
        ),
        f"gmlm translate --checkpoint {PADIR} --rescore {AR} --prune-after 0 --input de.txt "
        "--output en.txt": FILES,
        "gmlm evaluate --hyp en.txt --ref ref.en.txt": (
            "tests/evaluation/test_evaluate.py::test_cli_json_and_errors"
        ),
        f"gmlm bench --ar {AR} --padir {PADIR} --data runs/demo/data --sentences 100": (
            "tests/bench/test_bench.py::cli_run"
        ),
        "gmlm analyze table1 --direction de-en=checkpoints/multi30k-de-en --direction "
        "en-de=checkpoints/multi30k-en-de --multi30k ../shared/data/multi30k": (
            "tests/analysis/test_table1.py::"
            "test_two_directions_give_the_papers_rows_and_scores_equal_to_translate_and_evaluate"
        ),
        f"gmlm analyze attention --checkpoint {PADIR} --data runs/demo/data": (
            "tests/analysis/test_attention.py::test_cli_json_end_to_end"
        ),
    },
    "docs/serving.md": {
        "gmlm serve &": SERVE,
        "gmlm serve --model en-de=checkpoints/multi30k-en-de/padir --rescore "
        "en-de=checkpoints/multi30k-en-de/ar": (
            "tests/serve/test_serve_rescoring.py::"
            "test_the_documented_command_serves_the_shipped_english_german_pair"
        ),
        "gmlm loadtest --rates 1,2,4,8 --duration 20 --plot load.png": LOADTEST,
        f"gmlm export --format ctranslate2 --checkpoint {AR} --out runs/ar-ct2": (
            "tests/export/test_ctranslate2.py::test_cli_export_format_ctranslate2"
        ),
    },
    "docs/training.md": {
        "gmlm data prepare --corpus multi30k:../shared/data/multi30k --out runs/data/multi30k": (
            FIVE
        ),
        "gmlm train --config small-ar data=runs/data/multi30k out=runs/teacher": FIVE,
        "gmlm distill --teacher runs/teacher --data runs/data/multi30k --out runs/data/distilled": (
            FIVE
        ),
        "gmlm train --config small-padir data=runs/data/distilled out=runs/padir": FIVE,
        "gmlm translate --checkpoint runs/padir --steps 4 --length-beam 5 < de.txt > en.txt": FIVE,
        "gmlm analyze calibrate --checkpoint runs/padir --data runs/data/multi30k": (
            "tests/analysis/test_calibration.py::test_ar_length_penalty_and_the_cli"
        ),
        "gmlm data stats runs/data/multi30k": "tests/data/test_cli.py::test_prepare_stats_bench",
        "gmlm throughput --config small-padir data=runs/data/multi30k": (
            "tests/training/test_trainer.py::test_throughput_command_reports_both_precisions"
        ),
        "gmlm export --checkpoint runs/padir --out runs/padir-export": (
            "tests/training/test_trainer.py::test_export_bf16_halves_the_size_and_translates"
        ),
        "gmlm train --config small-padir data=runs/data/distilled out=runs/padir-tuned "
        "init_from=runs/padir max_steps=3000 optim.lr=1e-4 optim.warmup_steps=200": (
            "tests/training/test_init_from.py::test_a_run_starts_from_the_checkpoints_weights"
        ),
        "gmlm average --run runs/padir --first 8000 --last 10000 --out runs/padir-at-10k": (
            "tests/training/test_averaging.py::"
            "test_a_range_of_steps_averages_to_the_mean_of_its_files"
        ),
        "gmlm reproduce --preset multi30k-quick --out runs/quick": (
            "tests/reproduce/test_demo.py::test_demo_without_the_test_set_then_with_it"
        ),
    },
    "docs/theory.md": {
        "gmlm theory verify": THEORY,
        "gmlm theory verify --max-n 12": THEORY,
        "gmlm theory verify --couplings 0.1,1.5 --fields 0.3": THEORY,
        "gmlm theory figure1 / figure2": (
            "tests/theory/test_figures.py::test_estimation_figure_values_match_brute_force"
        ),
        "gmlm theory figure3": (
            "tests/theory/test_figures.py::test_hitting_figure_values_match_brute_force"
        ),
        "gmlm theory poincare --n 22 --k 1": (
            "tests/theory/test_spectral_gap.py::test_poincare_command_prints_time_and_memory"
        ),
        "gmlm theory bench": "tests/theory/test_spectral_gap.py::test_bench_end_to_end",  # slow
    },
}


def test_every_documented_command_runs_in_a_test() -> None:
    """COVERED maps every command of each document of DOCS, and only those, to a test that
    exists and runs that command (a test elsewhere names its subcommand; this file's read the
    documents)."""
    assert sorted(COVERED) == sorted(DOCS)
    for doc in DOCS:
        assert sorted(set(shell_commands(doc))) == sorted(COVERED[doc]), doc
    for command, test in (item for doc in DOCS for item in COVERED[doc].items()):
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
        names = re.match(r"gmlm((?: [a-z0-9]+(?=\s|$))+)", command)
        assert names is not None
        if path:  # this file's tests run the documents' own lines
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
    """docs/training.md's "Translation in five commands", each command as written but on a tiny
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
    five = (
        read("docs/training.md")
        .split("## Translation in five commands", 1)[1]
        .split("```bash\n", 1)[1]
    )
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


def test_the_theory_verify_commands_run(tmp_path: Path) -> None:
    """docs/theory.md's `gmlm theory verify` lines, on the grid up to N = 3 (--max-n 3)."""
    from gmlm.cli.main import main

    lines = [c for c in shell_commands("docs/theory.md") if c.startswith("gmlm theory verify")]
    assert len(lines) == 3
    for number, line in enumerate(lines):
        words = re.sub(r"--max-n \d+", "", line).split()[1:]
        out = tmp_path / str(number)
        assert main([*words, "--max-n", "3", "--json", "--out", str(out)]) == 0, line
        assert (out / "verify.json").is_file()


def test_the_gpu_guide_names_every_command_that_does_not_pick_the_gpu() -> None:
    """docs/GPU.md says every command picks the GPU automatically: the sentence names each
    whose --device default is not `auto` (bench and serve run on the CPU unless told)."""
    from gmlm.cli.main import build_parser

    def commands(parser: argparse.ArgumentParser, names: str) -> Iterator[tuple[str, Any]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from commands(child, f"{names} {name}".strip())
            yield names, action

    sentence = re.search(
        r"every command picks the GPU automatically[^.]*\.", read("docs/GPU.md"), re.S
    )
    assert sentence is not None
    text = " ".join(sentence.group(0).split())
    not_auto = [
        names
        for names, action in commands(build_parser(), "")
        if "--device" in action.option_strings and action.default != "auto"
    ]
    assert sorted(not_auto) == ["bench", "serve"]
    assert [n for n in not_auto if f"`gmlm {n}`" not in text] == []


def test_the_docs_translate_files_as_shown(tmp_path: Path, monkeypatch) -> None:
    """Each `gmlm translate --checkpoint checkpoints/... --input de.txt --output en.txt` of the
    documents runs as written (in a folder holding de.txt, on the CPU) and writes a line for
    each line of de.txt."""
    from gmlm.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").symlink_to(ROOT / "checkpoints")
    (tmp_path / "de.txt").write_text(
        "Zwei Hunde spielen im Schnee.\nEin Mann fährt Fahrrad.\n", encoding="utf-8"
    )
    lines = sorted(
        {
            command
            for doc in DOCS
            for command in shell_commands(doc)
            if re.fullmatch(
                r"gmlm translate --checkpoint checkpoints/\S+ .*--input de.txt --output en.txt",
                command,
            )
        }
    )
    assert len(lines) >= 3
    for command in lines:
        (tmp_path / "en.txt").unlink(missing_ok=True)
        assert main([*command.split()[1:], "--device", "cpu"]) == 0, command
        assert len((tmp_path / "en.txt").read_text(encoding="utf-8").splitlines()) == 2


def test_the_serving_schema_is_what_the_tool_generates() -> None:
    """docs/serving.md's request and response schema section is what tools/openapi_doc.py
    prints from the service's OpenAPI document (rewrite it with `--write docs/serving.md`)."""
    from tests.helpers.tools import load_tool

    tool = load_tool("openapi_doc")
    text = read("docs/serving.md")
    shown = text[text.index(tool.BEGIN) : text.index(tool.END) + len(tool.END)]
    assert shown == tool.section(tool.openapi())


def test_the_python_blocks_run_as_shown(monkeypatch, capsys) -> None:
    """README.md's and docs/python-api.md's Python blocks run as written (from the repository
    root, on the shipped checkpoints, on the CPU) and print one translation per call."""
    import torch

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # device="auto": the CPU
    for doc in ("README.md", "docs/python-api.md"):
        blocks = re.findall(r"^```python\n(.*?)^```\n", read(doc), flags=re.S | re.M)
        assert blocks, f"{doc} shows no Python"
        for block in blocks:
            exec(compile(block, doc, "exec"), {})  # the documentation's own code
            printed = capsys.readouterr().out.splitlines()
            assert len(printed) == block.count("print(") > 0
            assert all(re.fullmatch(r"\['[A-Z][^']+'\]", line) for line in printed), printed
