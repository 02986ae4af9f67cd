"""Mutation testing of one module against the tests that claim to cover it.

    python tools/mutate.py src/gmlm/decoding/scores.py tests/decoding/test_refinement.py ...

Each mutant is one small change to the module's syntax tree (a comparison's boundary, an
arithmetic or boolean operator, a number, True/False, a condition negated, a call statement
dropped; never a docstring, a decorator, a type annotation or the text of an error message: a
decorator's arguments declare, e.g. a frozen dataclass, rather than compute). The tests run
once unchanged, recording the module's lines they execute (in any thread); a mutant on a line
they never reach survives without being run ("not reached"). Every other mutant runs the tests
(`pytest -x`) in a child process forked from one that has already imported torch, with the
mutated module served by an import hook (the source tree is never touched): a failing test kills
it, a child past its CPU limit (3x the unchanged run's, plus --slack, 10 s) or its wall-clock
limit (the same of the unchanged run's wall-clock time: a mutant that makes a test wait on a
lock or a socket uses no CPU) counts as killed by the timeout. One process at a time, on one
thread: `OMP_NUM_THREADS=1` is set for the children.

Why not mutmut: mutmut 3 copies the whole project into `mutants/`, runs the full test suite
once to map tests to functions and forks a worker per core; here one module is checked against
chosen tests, one process at a time, on a shared 2-core machine, with nothing written into the
source tree. `--json` records the result; `--table` renders such records as the
table of docs/MUTATION.md's "Survival per module".
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any

SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.And: ast.Or,
    ast.Or: ast.And,
}


@dataclass(frozen=True)
class Mutant:
    index: int  # the node's position in ast.walk order (the same in every parse)
    line: int
    what: str  # e.g. "< -> <=", "1 -> 2", "drop call"


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    status: str  # killed | timeout | survived | not reached
    seconds: float


def _skipped_nodes(tree: ast.Module) -> set[int]:
    """ids of the nodes no mutant touches: docstrings, annotations, decorators, error messages,
    and `if TYPE_CHECKING:` blocks."""
    skipped: set[int] = set()

    def skip(node: ast.AST | None) -> None:
        if node is not None:
            skipped.update(id(child) for child in ast.walk(node))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and _is_text(first.value):
            skip(first)
        if isinstance(node, ast.arg | ast.AnnAssign):
            skip(node.annotation)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            skip(node.returns)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for decorator in node.decorator_list:  # @dataclass(frozen=True), @lru_cache(8)
                skip(decorator)
        if isinstance(node, ast.Raise | ast.JoinedStr):
            skip(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip(node)
    return skipped


def _mutations(node: ast.AST) -> Iterator[tuple[str, Any]]:
    """(description, kind) of each mutant of `node`: `mutated_tree` applies the kind (an
    operator swap, a dropped unary operator, a negated condition, a dropped call) or puts the
    value in place of the constant."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in SWAPS:
        yield f"{_op(node.ops[0])} -> {_op(SWAPS[type(node.ops[0])]())}", "op"
    text = isinstance(node, ast.BinOp) and _is_text(node.left)  # "%" formatting, "+" joining
    if isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in SWAPS and not text:
        yield f"{_op(node.op)} -> {_op(SWAPS[type(node.op)]())}", "op"
    if isinstance(node, ast.BoolOp):
        yield f"{_op(node.op)} -> {_op(SWAPS[type(node.op)]())}", "op"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
        yield f"drop {_op(node.op)}", "unary"
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
        value = (not node.value) if isinstance(node.value, bool) else node.value + 1
        yield f"{node.value!r} -> {value!r}", value
    if isinstance(node, ast.If | ast.IfExp | ast.While) and not isinstance(node.test, ast.Compare):
        yield "negate condition", "negate"
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield "drop call", "drop"


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant | ast.JoinedStr) and not isinstance(
        getattr(node, "value", None), int | float
    )


def _op(op: ast.AST) -> str:
    names = {
        ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
        ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.Add: "+",
        ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
        ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.And: "and", ast.Or: "or",
        ast.Not: "not", ast.USub: "-",
    }  # fmt: skip
    return names[type(op)]


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    skipped = _skipped_nodes(tree)
    found = []
    for index, node in enumerate(ast.walk(tree)):
        if id(node) in skipped:
            continue
        for what, _ in _mutations(node):
            found.append(Mutant(index, getattr(node, "lineno", 0), what))
    return found


def mutated_tree(source: str, mutant: Mutant) -> ast.Module:
    tree = ast.parse(source)
    node = next(n for i, n in enumerate(ast.walk(tree)) if i == mutant.index)
    kind = next(k for what, k in _mutations(node) if what == mutant.what)
    if kind == "op":
        if isinstance(node, ast.Compare):
            node.ops = [SWAPS[type(node.ops[0])]()]
        else:
            node.op = SWAPS[type(node.op)]()  # type: ignore[attr-defined]
    elif kind == "unary":
        _replace(tree, node, node.operand)  # type: ignore[attr-defined]
    elif kind == "negate":
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)  # type: ignore[attr-defined]
    elif kind == "drop":
        _replace(tree, node, ast.Pass())
    else:
        node.value = kind  # type: ignore[attr-defined]
    return ast.fix_missing_locations(tree)


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, ast.copy_location(new, old))
            elif isinstance(value, list) and any(item is old for item in value):
                value[[item is old for item in value].index(True)] = ast.copy_location(new, old)


class _Serve(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `name` from a compiled code object instead of its file."""

    def __init__(self, name: str, path: Path, code: CodeType) -> None:
        self.name, self.path, self.code = name, path, code

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec(self.code, module.__dict__)


def _run_tests(
    name: str, path: Path, code: CodeType, tests: list[str], cpu_limit: float | None,
    lines: Path | None = None, wall_limit: float | None = None,
) -> tuple[str, float, float]:  # fmt: skip
    """Runs the tests in a forked child with `code` as module `name`; (status, wall-clock
    seconds, CPU seconds of the child). A child past `cpu_limit` CPU seconds or `wall_limit`
    wall-clock seconds is stopped: "timeout"."""
    start = time.monotonic()
    basetemp = Path(tempfile.mkdtemp(prefix="mutate-"))
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 3
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            if cpu_limit is not None:
                used = resource.getrusage(resource.RUSAGE_SELF).ru_utime
                limit = int(used + cpu_limit) + 1
                resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))
            if wall_limit is not None:
                signal.alarm(int(wall_limit) + 1)  # SIGALRM ends the child
            sys.meta_path.insert(0, _Serve(name, path, code))
            executed: set[int] = set()
            if lines is not None:  # in this thread and every thread the tests start
                threading.settrace(_line_tracer(str(path), executed))
                sys.settrace(_line_tracer(str(path), executed))
            import pytest

            status = int(
                pytest.main(
                    [*tests, "-x", "-q", "-p", "no:cacheprovider", f"--basetemp={basetemp}"]
                )
            )
            sys.settrace(None)
            threading.settrace(None)
            if lines is not None:
                lines.write_text(json.dumps(sorted(executed)))
        finally:
            os._exit(status)
    _, wait_status, usage = os.wait4(pid, 0)
    shutil.rmtree(basetemp, ignore_errors=True)
    seconds = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(wait_status):
        signum = os.WTERMSIG(wait_status)
        stopped = (signal.SIGXCPU, signal.SIGKILL, signal.SIGALRM)
        status = "timeout" if signum in stopped else "killed"
    else:
        status = "survived" if os.WEXITSTATUS(wait_status) == 0 else "killed"
    return status, seconds, cpu


def _line_tracer(filename: str, executed: set[int]) -> Any:
    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            executed.add(frame.f_lineno)
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == filename:
            executed.add(frame.f_lineno)
            return local
        return None

    return calls


def module_name(path: Path) -> str:
    parts = path.resolve().with_suffix("").parts
    if "src" not in parts:
        raise SystemExit(f"mutate: {path} is not under a src/ folder; give a module in src/")
    name = parts[len(parts) - parts[::-1].index("src") :]
    return ".".join(name[:-1] if name[-1] == "__init__" else name)


def run(
    path: Path,
    tests: list[str],
    sample: int | None,
    seed: int,
    log: Any = print,
    earlier: dict[str, Any] | None = None,
    slack: float = 10.0,
) -> dict[str, Any]:
    """Runs the mutants of `path` (`sample` of them, drawn with `seed`) against `tests`.
    `earlier`: a record of the same module source and draw, by fewer or the same tests; its
    killed mutants stay killed (a test added kills more, never fewer) and only its survivors
    run again."""
    source = path.read_text(encoding="utf-8")
    digest = hashlib.sha256(source.encode()).hexdigest()
    name = module_name(path)
    found = mutants(source)
    if sample is not None and sample < len(found):
        found = sorted(random.Random(seed).sample(found, sample), key=lambda m: m.index)
    killed_before: dict[Mutant, str] = {}
    if earlier is not None:
        if (earlier["source_sha256"], earlier["sample"], earlier["seed"]) != (digest, sample, seed):
            raise SystemExit(f"mutate: --after: {path} or the draw changed since; run them all")
        killed_before = {
            Mutant(o["index"], o["line"], o["what"]): o["status"]
            for o in earlier["outcomes"]
            if o["status"] in ("killed", "timeout")
        }
    with tempfile.TemporaryDirectory() as tmp:
        lines_file = Path(tmp) / "lines.json"
        original = compile(source, str(path.resolve()), "exec")
        status, wall, baseline = _run_tests(name, path.resolve(), original, tests, None, lines_file)
        if status != "survived":
            raise SystemExit(f"mutate: the tests fail on the unchanged {path}; fix them first")
        reached = set(json.loads(lines_file.read_text()))
    log(f"{name}: {len(found)} mutants; the unchanged tests: {wall:.0f} s, {baseline:.0f} s CPU")
    outcomes = []
    for number, mutant in enumerate(found, 1):
        if mutant in killed_before:  # carried over, not run
            outcome = Outcome(mutant, killed_before[mutant], 0.0)
        elif mutant.line not in reached:
            outcome = Outcome(mutant, "not reached", 0.0)
        else:
            code = compile(mutated_tree(source, mutant), str(path.resolve()), "exec")
            status, seconds, _ = _run_tests(
                name, path.resolve(), code, tests, 3 * baseline + slack,
                wall_limit=3 * wall + slack,
            )  # fmt: skip
            outcome = Outcome(mutant, status, seconds)
        outcomes.append(outcome)
        log(f"[{number}/{len(found)}] line {mutant.line}: {mutant.what}: {outcome.status}")
    killed = sum(o.status in ("killed", "timeout") for o in outcomes)
    return {
        "module": str(path),
        "tests": tests,
        "mutants": len(outcomes),
        "killed": killed,
        "survived": len(outcomes) - killed,
        "not_reached": sum(o.status == "not reached" for o in outcomes),
        "sample": sample,
        "seed": seed,
        "source_sha256": digest,
        "outcomes": [
            {**asdict(o.mutant), "status": o.status, "seconds": round(o.seconds, 1)}
            for o in outcomes
        ],
    }


def _unchanged(module: Path, record: Path) -> bool:
    digest = hashlib.sha256(module.read_bytes()).hexdigest()
    return bool(json.loads(record.read_text(encoding="utf-8"))["source_sha256"] == digest)


def table(records: list[dict[str, Any]], before: dict[str, dict[str, Any]] | None = None) -> str:
    """Markdown rows of `records`; with `before` (module -> an earlier record of the same
    draw), that record's survivors and survival rate beside them."""
    head = "| module | tests | mutants | killed | survived (not reached) | survival |"
    if before is not None:
        earlier = "| survived before (not reached) | survival before "
        head = head.replace("| killed", earlier + "| killed")
    rows = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in records:
        tests = ", ".join(f"`{t}`" for t in r["tests"])
        cells = [f"`{r['module']}`", tests, str(r["mutants"])]
        if before is not None:
            b = before.get(r["module"])
            cells += [f"{b['survived']} ({b['not_reached']})", _rate(b)] if b else ["", ""]
        cells += [str(r["killed"]), f"{r['survived']} ({r['not_reached']})", _rate(r)]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _rate(record: dict[str, Any]) -> str:
    return f"{100 * record['survived'] / max(record['mutants'], 1):.0f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", type=Path, nargs="?", help="a module under src/")
    parser.add_argument("tests", nargs="*", help="the tests that claim to cover it (pytest ids)")
    parser.add_argument("--sample", type=int, help="run this many mutants, drawn with --seed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--slack",
        type=float,
        default=10.0,
        help="a mutant's CPU and wall-clock limits: 3x the unchanged run's plus this "
        "(default %(default)s s)",
    )
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument(
        "--after",
        type=Path,
        help="an earlier --json record of the unchanged module: run only its survivors",
    )
    parser.add_argument("--survivors", action="store_true", help="list only the survivors")
    parser.add_argument(
        "--preload",
        default="pytest,torch,numpy,sentencepiece,safetensors",
        help="modules imported once before forking (default: %(default)s)",
    )
    parser.add_argument("--table", type=Path, nargs="+", help="render --json records as Markdown")
    parser.add_argument(
        "--before",
        type=Path,
        nargs="+",
        help="with --table: earlier records of the same modules, shown beside them",
    )
    parser.add_argument(
        "--plan",
        type=Path,
        help="run every line of this file (a module, its tests and options, as on the command "
        "line; # starts a comment), each writing DIR/MODULE.json (--out DIR), then the table",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/mutation"))
    parser.add_argument(
        "--plan-after",
        type=Path,
        help="with --plan: a folder of earlier records; a module unchanged since runs only its "
        "survivors (--after)",
    )
    args = parser.parse_args(argv)
    if args.table:
        records = [json.loads(p.read_text(encoding="utf-8")) for p in args.table]
        earlier = [json.loads(p.read_text(encoding="utf-8")) for p in args.before or []]
        before = {r["module"]: r for r in earlier} if args.before else None
        print(table(records, before), end="")
        return 0
    if args.plan:
        written = []
        for line in args.plan.read_text(encoding="utf-8").splitlines():
            words = line.split("#")[0].split()
            if words:
                written.append(args.out / (Path(words[0]).stem + ".json"))
                earlier = args.plan_after and args.plan_after / written[-1].name
                if earlier and earlier.is_file() and _unchanged(Path(words[0]), earlier):
                    words += ["--after", str(earlier)]
                main([*words, "--json", str(written[-1]), "--preload", args.preload])
        folder = args.plan_after
        earlier = [str(folder / p.name) for p in written if folder and (folder / p.name).is_file()]
        return main(["--table", *map(str, written), *(["--before", *earlier] if earlier else [])])
    if args.module is None or not args.tests:
        parser.error("give a module and the tests that cover it")
    os.environ["OMP_NUM_THREADS"] = "1"
    for preload in filter(None, args.preload.split(",")):
        __import__(preload)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    earlier = json.loads(args.after.read_text(encoding="utf-8")) if args.after else None
    record = run(
        args.module, args.tests, args.sample, args.seed,
        log=(lambda _m: None) if args.survivors else print, earlier=earlier, slack=args.slack,
    )  # fmt: skip
    for o in record["outcomes"]:
        if o["status"] in ("survived", "not reached"):
            print(f"survived: {args.module}:{o['line']}: {o['what']} ({o['status']})")
    print(table([record]), end="")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
