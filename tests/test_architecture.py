"""The package's import structure: imports flow one way (no cycles)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def module_imports(root: Path, package: str) -> dict[str, set[str]]:
    """Module of `package` (a folder of `root`) -> the modules of `package` it imports anywhere
    in its file (late imports too).

    `from gmlm.a import b` counts as importing `gmlm.a.b` when that is a module, else `gmlm.a`;
    a package is its `__init__`.
    """
    paths = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in paths else node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle_through_a_late_import(tmp_path: Path) -> None:
    pkg = tmp_path / "gmlm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from gmlm.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from gmlm import c\n")
    (pkg / "c.py").write_text("import gmlm.a\n")
    (pkg / "d.py").write_text("from gmlm.a import f\n")
    assert cycles(module_imports(tmp_path, "gmlm")) == [["gmlm.a", "gmlm.b", "gmlm.c"]]


def test_no_import_cycles() -> None:
    """Two modules that need each other share a third (STYLE.md habit 11); a late import that
    closes a cycle counts too."""
    assert cycles(module_imports(SRC, "gmlm")) == []


def package_imports(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph of `module_imports` folded to gmlm's packages: `gmlm.a.b` belongs to
    `a`, a top-level module (`gmlm.config`) is a package of its own, and `gmlm` itself (its
    `__init__`: `gmlm.load`) is `__init__`."""

    def package(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    folded: dict[str, set[str]] = {package(m): set() for m in graph}
    for module, deps in graph.items():
        folded[package(module)] |= {package(d) for d in deps} - {package(module)}
    return folded


def package_order() -> list[set[str]]:
    """docs/ARCHITECTURE.md's package order: its "Package order" block, layers joined by
    `->`, the packages of a layer by commas (a parenthesis is a comment)."""
    text = (SRC.parent / "docs" / "ARCHITECTURE.md").read_text()
    block = re.search(r"## Package order\n.*?```text\n(.*?)```", text, re.DOTALL)
    assert block is not None
    layers = re.sub(r"\([^)]*\)", "", block.group(1)).split("->")
    return [{name.strip() for name in layer.split(",")} for layer in layers]


def order_problems(packages: dict[str, set[str]], order: list[set[str]]) -> list[str]:
    """Each import of a later package into an earlier one ("a -> b"), each package missing
    from the order, and each cycle between packages."""
    layer = {name: i for i, names in enumerate(order) for name in names}
    problems = [f"{name}: not in the package order" for name in sorted(set(packages) - set(layer))]
    problems += sorted(
        f"{name} -> {dep}"
        for name, deps in packages.items()
        for dep in deps
        if name in layer and dep in layer and layer[dep] > layer[name]
    )
    problems += [" <-> ".join(cycle) for cycle in cycles(packages)]
    return problems


def test_order_checker_finds_an_import_into_an_earlier_package_and_a_cycle(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "gmlm"
    for name in ("low", "mid", "top"):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from gmlm.top.c import g\n")  # late
    (pkg / "mid" / "b.py").write_text("from gmlm.low.a import f\nimport gmlm.errors\n")
    (pkg / "top" / "c.py").write_text("from gmlm.mid import b\n")
    packages = package_imports(module_imports(tmp_path, "gmlm"))
    order = [{"errors", "__init__"}, {"low"}, {"mid"}, {"top"}]
    assert order_problems(packages, order) == ["low -> top", "low <-> mid <-> top"]
    assert order_problems(packages | {"low": set()}, order) == []
    assert order_problems(packages | {"low": set()}, order[1:]) == [
        "__init__: not in the package order",
        "errors: not in the package order",
    ]


def test_packages_import_only_the_packages_before_them() -> None:
    """docs/ARCHITECTURE.md's package order holds, late imports included: no package imports
    one that comes after it (inference never imports training; the domain packages never the
    benchmarks, the reproduction or the command line), and no two packages need each other."""
    packages = package_imports(module_imports(SRC, "gmlm"))
    assert order_problems(packages, package_order()) == []


def test_architecture_page_names_modules_that_exist() -> None:
    """docs/ARCHITECTURE.md stays true to the tree: every module path it names exists."""
    text = (SRC.parent / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"\b((?:[a-z_]+/)+[a-z_]+\.py)\b", text))
    assert len(named) > 20
    root = SRC.parent

    def exists(path: str) -> bool:  # src/gmlm-relative, gmlm/..., or repository-relative
        return any((base / path).is_file() for base in (SRC / "gmlm", SRC, root))

    missing = [p for p in sorted(named) if not exists(p)]
    assert missing == []


def test_help_does_not_load_torch() -> None:
    """`gmlm --help` builds every subcommand's parser; none of that may import torch (seconds
    of start-up). A fresh interpreter, as this process has torch loaded already."""
    probe = (
        "import sys\n"
        "from gmlm.cli.main import build_parser\n"
        "parser = build_parser()\n"
        "try:\n"
        "    parser.parse_args(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('torch', 'gmlm.data.batching') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    assert "usage: gmlm" in done.stdout
    assert done.stdout.splitlines()[-1] == "[]"


def test_settings_modules_load_no_torch() -> None:
    """Every settings module (settings.py, *_settings.py: a command's flags are derived from
    it) imports without torch, its package's __init__ included. A fresh interpreter."""
    modules = sorted(
        ".".join(path.relative_to(SRC).with_suffix("").parts)
        for pattern in ("settings.py", "*_settings.py")
        for path in (SRC / "gmlm").rglob(pattern)
    )
    assert "gmlm.translation.distill_settings" in modules
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    assert 'torch' not in sys.modules, name\n"
        "print('torch-free')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "torch-free", done.stderr[-2000:]


def test_lazy_translation_package_exports_every_name() -> None:
    import importlib

    import gmlm.translation

    homes = gmlm.translation._HOMES
    assert sorted(gmlm.translation.__all__) == sorted(homes)
    for name in gmlm.translation.__all__:
        assert getattr(gmlm.translation, name) is getattr(
            importlib.import_module(homes[name]), name
        )


def test_lazy_data_package_exports_every_name() -> None:
    import gmlm.data

    for name in gmlm.data.__all__:
        assert getattr(gmlm.data, name).__module__.startswith("gmlm.data."), name


def test_cited_documents_are_in_the_repository() -> None:
    """The code cites docs/*.md of this repository (and the paper), never a document or an
    issue tracker the reader does not have."""
    root = SRC.parent
    texts = {p: p.read_text() for p in SRC.rglob("*") if p.suffix in (".py", ".yaml")}
    cited = {m for text in texts.values() for m in re.findall(r"\bdocs/[\w.-]+\.md\b", text)}
    assert cited and all((root / path).is_file() for path in cited), cited
    stray = [
        str(p.relative_to(root))
        for p, text in texts.items()
        if re.search(r"PADIR_SPEC|\bissue \d+", text)
    ]
    assert stray == []


def test_tests_import_shared_code_from_tests_helpers_only() -> None:
    """Shared test code lives in tests/helpers/; fixtures in conftest.py files are found by
    pytest, never imported, and test modules do not import each other."""
    graph = module_imports(SRC.parent, "tests")
    wrong = {
        name: sorted(d for d in deps if not d.startswith("tests.helpers"))
        for name, deps in graph.items()
    }
    assert {name: deps for name, deps in wrong.items() if deps} == {}


def result_keys() -> set[str]:
    """Every JSON key of the typed results that cross stages, nested records included."""
    import typing

    from gmlm.analysis.results import AttentionResult, LengthResult
    from gmlm.bench.result import BenchResult
    from gmlm.evaluation.results import Evaluation, EvaluationScores
    from gmlm.reproduce.stage_record import StageRecord
    from gmlm.reproduce.stand_in import ExampleTranslations
    from gmlm.reproduce.train_ablation import TrainAblationResult
    from gmlm.theory.verify import VerifyReport

    keys: set[str] = set()
    seen: set[type] = set()
    todo: list[object] = [
        AttentionResult,
        LengthResult,
        BenchResult,
        Evaluation,
        EvaluationScores,
        ExampleTranslations,
        StageRecord,
        TrainAblationResult,
        VerifyReport,
    ]
    while todo:
        hint = todo.pop()
        todo.extend(typing.get_args(hint))
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)) or hint in seen:
            continue
        seen.add(hint)
        hints = typing.get_type_hints(hint)
        for f in dataclasses.fields(hint):
            if not f.metadata.get("flatten"):
                keys.add(f.metadata.get("key") or f.name)
            todo.append(hints[f.name])
    return keys


def string_keyed_reads(path: Path, keys: set[str]) -> list[str]:
    """`x["key"]` and `x.get("key")` in `path` with a key in `keys`, as "line: key"; a
    subscript of an UPPER_CASE module constant (a table of the module's own) is not a read."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            constant = isinstance(node.value, ast.Name) and node.value.id.isupper()
            key = None if constant else node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key = node.args[0].value
        if isinstance(key, str) and key in keys:
            found.append(f"{node.lineno}: {key}")
    return found


def test_string_keyed_read_finder(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        'TABLE = {"ar": 1}\n'
        "def f(scores, info):\n"
        '    return scores["systems"], info.get("summary"), TABLE["ar"], info["other"]\n'
    )
    assert string_keyed_reads(module, {"systems", "summary", "ar"}) == ["3: systems", "3: summary"]


def test_reproduction_reads_results_through_their_classes() -> None:
    """What the stages write is read back through its typed record (STYLE habit 10), never
    by string keys in the reproduction code: a renamed key is then an error naming the file
    and the key, not an empty table."""
    keys = result_keys()
    assert {"claims", "systems", "speedups", "summary", "worst", "bleu"} <= keys
    found = {
        str(path.relative_to(SRC)): reads
        for path in sorted((SRC / "gmlm" / "reproduce").glob("*.py"))
        if (reads := string_keyed_reads(path, keys))
    }
    assert found == {}


def test_provenance_is_assembled_in_one_module() -> None:
    """Versions, CPU model, host and commit come from gmlm.provenance only."""
    pattern = re.compile(
        r"\bplatform\.\w+\(|/proc/cpuinfo|rev-parse|importlib\.metadata|"
        r"\b(?:torch|ct2|ctranslate2|import_ctranslate2\(\))\.__version__|"
        r"from gmlm import __version__|gmlm\.__version__"
    )
    allowed = {"gmlm/provenance.py", "gmlm/cli/main.py"}  # main: the --version flag
    found = sorted(
        str(path.relative_to(SRC))
        for path in (SRC / "gmlm").rglob("*.py")
        if str(path.relative_to(SRC)) not in allowed and pattern.search(path.read_text())
    )
    assert found == []


def test_provenance_loads_no_torch() -> None:
    probe = (
        "import sys\n"
        "from gmlm import provenance\n"
        "assert provenance.software()['python'] and provenance.cpu_model()\n"
        "print('torch' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "False"


def test_lazy_decoding_package_exports_every_name() -> None:
    import importlib

    import gmlm.decoding

    homes = gmlm.decoding._HOMES
    assert sorted(gmlm.decoding.__all__) == sorted(homes)
    for name in gmlm.decoding.__all__:
        home = importlib.import_module(homes[name])
        assert getattr(gmlm.decoding, name) is getattr(home, name), name
        assert home.__name__.startswith("gmlm.decoding."), name


def subcommand(*names: str) -> argparse.ArgumentParser:
    """The parser of `gmlm NAME [SUBNAME]`."""
    from gmlm.cli.main import build_parser

    parser = build_parser()
    for name in names:
        (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Destination -> action of every flag that --help shows."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS}


# The settings only Python callers have (metadata cli=False), each for a reason its help gives.
PYTHON_ONLY = {"init", "early_stop", "return_steps", "return_attention", "min_length", "max_length"}


def test_every_decoding_setting_reaches_gmlm_translate() -> None:
    """A field added to SearchOptions or RefinementOptions gets a translate flag of its own
    (or is declared Python-only, which this test pins), with its help and default."""
    from gmlm.cli.flags import show
    from gmlm.decoding.options import RefinementOptions, SearchOptions

    fields = {
        f.name: f for cls in (SearchOptions, RefinementOptions) for f in dataclasses.fields(cls)
    }
    shown = flags(subcommand("translate"))
    derived = {name for name in fields if name in shown}
    assert derived == set(fields) - PYTHON_ONLY
    assert {n for n, f in fields.items() if not f.metadata["cli"]} == PYTHON_ONLY
    for name in derived - {"length_penalty"}:  # the one field both kinds have: below
        action = shown[name]
        assert action.default is None, name  # unset: the options class keeps its default
        if not isinstance(action, argparse._StoreConstAction):  # a switch says what it does
            assert (action.help or "").endswith(f"(default: {show(fields[name].default)})")
    penalty = shown["length_penalty"].help or ""
    assert f"{show(SearchOptions().length_penalty)} for autoregressive" in penalty
    assert f"{show(RefinementOptions().length_penalty)} for PaDIR" in penalty
    assert "(default: 4)" in (shown["steps"].help or "")


def test_an_undocumented_setting_cannot_reach_the_command_line() -> None:
    from gmlm.cli.options import add_option_flags
    from gmlm.decoding.options import RefinementOptions

    @dataclasses.dataclass(frozen=True)
    class Extended(RefinementOptions):
        new_setting: int = 3

    with pytest.raises(TypeError, match=r"Extended\.new_setting has no help"):
        add_option_flags(argparse.ArgumentParser(), {"PaDIR": Extended})


def test_no_per_kind_lists_of_settings() -> None:
    """Which kind owns a setting is derived from the options classes' fields."""
    texts = {p: p.read_text() for p in SRC.rglob("*.py")}
    assert [str(p) for p, text in texts.items() if re.search(r"\b(PADIR|AR)_ONLY\b", text)] == []


def test_analyze_offers_the_padir_settings_of_gmlm_translate() -> None:
    """Both analyses decode as `gmlm translate` does, with the same flags, except where the
    analysis sets a field itself (length: --length-weights) or ignores it (attention: the
    final filters never touch the raw hypotheses analysed)."""
    from gmlm.decoding.options import RefinementOptions
    from gmlm.settings import cli_fields

    padir = {f.name for f in cli_fields(RefinementOptions)}
    decoding = {"attention": padir - {"keep_initial_tokens", "dedup", "dedup_words"}}
    decoding["length"] = padir - {"length_score_weight"}
    for name, expected in decoding.items():
        shown = flags(subcommand("analyze", name))
        assert set(shown) & padir == expected, name
        translate = flags(subcommand("translate"))  # length_penalty: both kinds' defaults
        assert all(shown[n].help == translate[n].help for n in expected - {"length_penalty"})


def test_the_gmlm_package_exports_the_decoding_settings() -> None:
    """`gmlm.SearchOptions` and `gmlm.RefinementOptions` are the classes that
    `gmlm.load(DIR).translate` takes (README, Decoding), loaded lazily like gmlm.Translator."""
    import gmlm
    import gmlm.decoding

    for name in ("SearchOptions", "RefinementOptions"):
        assert name in gmlm.__all__
        assert getattr(gmlm, name) is getattr(gmlm.decoding, name)
    assert gmlm.Translator.__name__ == "Translator"
    with pytest.raises(AttributeError, match="no attribute 'Options'"):
        gmlm.Options  # noqa: B018


# The longest a function of src/gmlm may be, in lines (signature and docstring included): one
# idea per function, readable in one screen or two.
LONGEST_FUNCTION = 99


def test_no_function_is_longer_than_the_limit() -> None:
    lengths = sorted(
        (node.end_lineno - node.lineno + 1, f"{path.relative_to(SRC)}:{node.lineno} {node.name}")
        for path in (SRC / "gmlm").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno
    )
    print("longest functions:", lengths[-3:])
    assert lengths[-1][0] <= LONGEST_FUNCTION, [x for x in lengths if x[0] > LONGEST_FUNCTION]
